"""Count a dataset's tokens exactly as mlx-lm training will: its tokenizer, its dataset classes.

    python -m zyquo_tui.trainer.token_stats --model MODEL --data FOLDER [--data FOLDER...]
        [--max-seq-length 2048] [--splits train,valid,test] [--preview-line 1]
        [--lengths] [--feature NAME=KEY...]

Prints one JSON object per dataset folder, one per line (see docs/models-and-datasets.md): per
split the min, median, p95 and max tokens per row and how many rows max_seq_length truncates,
and a preview of one train row split into the masked prompt and the trained completion, as
mask_prompt trains it (--preview-line 0: none). --lengths adds every row's token count, per
split (what the memory checks need); --feature passes a run's *_feature setting (such as
prompt_feature=question) to mlx-lm's dataset classes, as training does. This is the one
place token counts come from. The tokenizer loads once for all folders (loading costs
seconds).
A folder that fails gives {"error": ..., "file": ..., "line": ..., "data": ...} instead; a
model that fails gives one such line with "fatal": true. Exit status 1 for a problem with the
model or the data, 2 for bad usage (a missing folder), else 0.

The tokenizer is loaded the way mlx_lm.load loads it (load_tokenizer with the config's
eos_token_id) but without the weights; rows go through create_dataset and each dataset's own
process(), the very code mlx-lm's trainer calls, so counts match training token for token.
Preference rows (prompt, chosen, rejected), which mlx-lm has no class for, are measured as
two completions rows, prompt+chosen and prompt+rejected, and count as the longer of the two.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE
from zyquo_tui.core.library.rows import PREFERENCE, PROMPTS, row_format
from zyquo_tui.core.library.token_stats import DEFAULT_MAX_SEQ_LENGTH, summarize_lengths
from zyquo_tui.core.system.entry_points import TOKEN_STATS, usage


class _Failure(Exception):
    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 status: int = EXIT_PROBLEMS) -> None:
        super().__init__(message)
        self.message, self.file, self.line, self.status = message, file, line, status


def _rows(path: Path):
    """(line, row) for each line of a JSONL file, parsed as mlx-lm parses it (json.loads)."""
    with open(path, "r", encoding="utf-8") as handle:
        for line, text in enumerate(handle, 1):
            try:
                yield line, json.loads(text)
            except json.JSONDecodeError as error:
                raise _Failure(f"not valid JSON ({error.msg}); run `zyquo-tui data check` "
                               "first", str(path), line) from None


def _load_tokenizer(model: Path):
    from mlx_lm.utils import load_config, load_tokenizer

    try:
        config = load_config(model)
        return load_tokenizer(model, eos_token_ids=config.get("eos_token_id", None))
    except Exception as error:  # transformers raises many kinds for a broken tokenizer
        raise _Failure(f"cannot load the tokenizer of {model}: {error}", str(model)) from None


class _RowTokenizer:
    """Turns rows into (tokens, prompt length) with mlx-lm's dataset classes.

    Like mlx-lm, the first row's format decides the dataset class for every row. Preference
    rows, which mlx-lm has no class for, become completions (or chat) rows one answer at a time.
    """

    def __init__(self, tokenizer, first_row: dict[str, Any], mask_prompt: bool,
                 features: dict[str, str]) -> None:
        self.tokenizer = tokenizer
        self.mask_prompt = mask_prompt
        self.features = features
        self.preference = row_format(first_row) == PREFERENCE
        # Prompts with answers (grpo) are counted as the prompt a generation starts from.
        self.prompts = row_format(first_row) == PROMPTS
        self.datasets: dict[str | None, Any] = {}
        if not (self.preference or self.prompts):
            self.dataset = self._dataset_for(first_row)

    def _dataset_for(self, row: dict[str, Any]):
        from mlx_lm.tuner.datasets import create_dataset

        kind = row_format(row)
        if kind not in self.datasets:
            # mlx-lm refuses mask_prompt for text rows: they have no prompt, every token trains.
            settings = types.SimpleNamespace(mask_prompt=self.mask_prompt and kind != "text",
                                             **self.features)
            self.datasets[kind] = create_dataset([row], self.tokenizer, settings)
        return self.datasets[kind]

    @staticmethod
    def _with_answer(row: dict[str, Any], answer: str) -> dict[str, Any]:
        prompt, reply = row["prompt"], row[answer]
        if isinstance(prompt, str) and isinstance(reply, str):
            return {"prompt": prompt, "completion": reply}
        turns = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        replies = reply if isinstance(reply, list) else [{"role": "assistant", "content": reply}]
        return {"messages": [*turns, *replies]}

    def process(self, row: dict[str, Any]) -> tuple[list[int], int]:
        if self.prompts:
            from zyquo_tui.trainer.encoding import prompt_tokens

            tokens = prompt_tokens(self.tokenizer, row["prompt"] if "prompt" in row
                                   else row["messages"])
            return tokens, len(tokens)
        if not self.preference:
            return self.dataset.process(row)
        pairs = []
        for answer in ("chosen", "rejected"):
            converted = self._with_answer(row, answer)
            pairs.append(self._dataset_for(converted).process(converted))
        return max(pairs, key=lambda pair: len(pair[0]))


def _explain(error: Exception) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    if "chat template" in text or "chat_template" in text:
        return ("the model's tokenizer has no chat template, which chat and completions rows "
                "need; use text rows ({\"text\": ...}) or a model with a chat_template")
    if isinstance(error, KeyError):
        return f"the key {error.args[0]!r} is missing"
    return text


def _split_lengths(path: Path, tokenizer, features: dict[str, str]
                   ) -> tuple[list[int], str | None]:
    """Tokens per row of one file, and the file's format (its first row's)."""
    lengths: list[int] = []
    row_tokenizer = None
    file_format = None
    for line, row in _rows(path):
        try:
            if row_tokenizer is None:
                file_format = row_format(row)
                row_tokenizer = _RowTokenizer(tokenizer, row, False, features)
            tokens, _ = row_tokenizer.process(row)
        except Exception as error:  # mlx-lm and the tokenizer raise many kinds
            raise _Failure(_explain(error), str(path), line) from None
        lengths.append(len(tokens))
    return lengths, file_format


def _preview(path: Path, wanted_line: int, tokenizer, max_seq_length: int,
             features: dict[str, str]) -> dict[str, Any]:
    for line, row in _rows(path):
        if line < wanted_line:
            continue
        try:
            tokens, offset = _RowTokenizer(tokenizer, row, True, features).process(row)
        except Exception as error:
            raise _Failure(_explain(error), str(path), line) from None
        cut = min(len(tokens), max_seq_length)
        offset = min(offset, cut)
        spans = []
        for kind, ids in (("masked", tokens[:offset]), ("trained", tokens[offset:cut]),
                          ("truncated", tokens[cut:])):
            if ids:
                spans.append({"kind": kind, "text": tokenizer.decode(ids), "tokens": len(ids)})
        return {"split": path.stem, "line": line, "tokens": len(tokens), "spans": spans}
    raise _Failure(f"no row at line {wanted_line}", str(path), wanted_line, EXIT_USAGE)


def _split_files(data: Path, splits: list[str]) -> dict[str, Path]:
    """The files to measure: a folder's train/valid/test.jsonl, or one .jsonl file."""
    if data.is_file():
        return {data.stem: data}
    if not (data / "train.jsonl").is_file():
        raise _Failure(f"{data} has no train.jsonl", str(data), status=EXIT_USAGE)
    return {s: data / f"{s}.jsonl" for s in splits if (data / f"{s}.jsonl").is_file()}


def measure(model: Path, data: Path, tokenizer, max_seq_length: int, splits: list[str],
            preview_line: int, lengths: bool = False,
            features: dict[str, str] | None = None) -> dict[str, Any]:
    """The statistics of one dataset folder or file (one JSON object of the output)."""
    features = features or {}
    files = _split_files(data, splits)
    result: dict[str, Any] = {"data": str(data), "model": str(model), "format": None,
                              "max_seq_length": max_seq_length, "splits": {}, "preview": None,
                              "note": ""}
    if lengths:
        result["lengths"] = {}
    for split, path in files.items():
        counts, file_format = _split_lengths(path, tokenizer, features)
        result["format"] = result["format"] or file_format
        result["splits"][split] = vars(summarize_lengths(counts, max_seq_length))
        if lengths:
            result["lengths"][split] = counts
    preview_file = files.get("train") or next(iter(files.values()), None)
    if preview_file is not None and preview_line > 0:
        result["preview"] = _preview(preview_file, preview_line, tokenizer, max_seq_length,
                                     features)
    if result["format"] == PREFERENCE:
        result["note"] = ("preference rows are counted as prompt+chosen and prompt+rejected "
                          "through the chat template, the longer of the two")
    elif result["format"] == PROMPTS:
        result["note"] = ("prompt rows are counted as their prompt through the chat template; "
                          "a grpo run adds up to max_completion_tokens of sampled answer to each")
    elif result["format"] == "text":
        result["note"] = "text rows have no prompt: mask_prompt does not apply, every token trains"
    return result


def _failure_json(failure: _Failure, **extra: Any) -> str:
    return json.dumps({"error": failure.message, "file": failure.file, "line": failure.line,
                       **extra})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=usage(TOKEN_STATS),
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, action="append", required=True,
                        help="a dataset folder; repeat to measure several with one tokenizer load")
    parser.add_argument("--max-seq-length", type=int, default=DEFAULT_MAX_SEQ_LENGTH)
    parser.add_argument("--splits", default="train,valid,test")
    parser.add_argument("--preview-line", type=int, default=1, help="0 for no preview")
    parser.add_argument("--lengths", action="store_true",
                        help="add every row's token count, per split")
    parser.add_argument("--feature", action="append", default=[], metavar="NAME=KEY",
                        help="a *_feature setting of mlx-lm's datasets, such as "
                        "prompt_feature=question")
    args = parser.parse_args(argv)
    features = dict(item.partition("=")[::2] for item in args.feature)
    try:
        if not (args.model / "config.json").is_file():
            raise _Failure(f"{args.model} is not a model folder (no config.json)",
                           str(args.model), status=EXIT_USAGE)
        tokenizer = _load_tokenizer(args.model)
    except _Failure as failure:
        # The model is unusable: one line for the whole call.
        print(_failure_json(failure, fatal=True))
        return failure.status
    status = 0
    splits = [s for s in args.splits.split(",") if s]
    for data in args.data:
        try:
            line = json.dumps(measure(args.model, data, tokenizer, args.max_seq_length, splits,
                                      args.preview_line, args.lengths, features))
        except _Failure as failure:
            line = _failure_json(failure, data=str(data))
            status = max(status, failure.status)
        print(line, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())

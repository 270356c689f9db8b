"""Token statistics of a dataset under a model's own tokenizer and chat template.

How long rows are in tokens decides memory and what max_seq_length cuts off, and only the
model's tokenizer and chat template can say. The counting runs in a subprocess
(`python -m zyquo_tui.trainer.token_stats`) that uses mlx-lm's own tokenizer loading and
dataset classes, so the numbers are the ones training will see; this module starts it, waits
without blocking the dashboard (call it from a worker thread), and reads its JSON.

This is the one route to token counts: `data check --model`, the datasets screen, and the
memory checks (the start gate, `plan`, the new-run screen, through `row_token_lengths`) all
come through `measure_tokens_many`.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE, UserError
from zyquo_tui.core.library.rows import feature_keys
from zyquo_tui.core.runs.settings import default_of
from zyquo_tui.core.system.child_process import run_child
from zyquo_tui.core.system.entry_points import TOKEN_STATS, python_command

DEFAULT_MAX_SEQ_LENGTH = default_of("max_seq_length")  # the run setting's default
DEFAULT_TIMEOUT_SECONDS = 900.0


@dataclass
class LengthStats:
    """Tokens per row of one split: what batches will hold and what max_seq_length cuts.

    median is the middle value (the mean of the two middle ones for an even count); p95 is
    the nearest-rank 95th percentile: the smallest length at least 95% of rows do not exceed.
    """

    rows: int
    min: int
    median: float
    p95: int
    max: int
    total_tokens: int
    truncated_rows: int  # rows longer than max_seq_length, which training cuts


@dataclass
class PreviewSpan:
    """A run of tokens of the preview row: masked (prompt), trained, or cut by truncation."""

    kind: str  # "masked" | "trained" | "truncated"
    text: str
    tokens: int


@dataclass
class RowPreview:
    """One row as mask_prompt trains it: the prompt is masked, the completion trained."""

    split: str
    line: int
    tokens: int
    spans: list[PreviewSpan]


@dataclass
class TokenStats:
    """Token statistics of a dataset's splits for one model, and a preview row; every row's
    token count per split in `lengths` when they were asked for."""

    data: str
    model: str
    format: str | None
    max_seq_length: int
    splits: dict[str, LengthStats] = field(default_factory=dict)
    preview: RowPreview | None = None
    note: str = ""
    lengths: dict[str, list[int]] | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.lengths is None:
            del data["lengths"]  # only the memory checks ask for them
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TokenStats":
        preview = data.get("preview")
        return cls(
            data=data["data"],
            model=data["model"],
            format=data.get("format"),
            max_seq_length=data["max_seq_length"],
            splits={name: LengthStats(**stats) for name, stats in data["splits"].items()},
            preview=None if preview is None else RowPreview(
                split=preview["split"], line=preview["line"], tokens=preview["tokens"],
                spans=[PreviewSpan(**span) for span in preview["spans"]],
            ),
            note=data.get("note", ""),
            lengths=data.get("lengths"),
        )


class TokenStatsFailed(UserError):
    """The model cannot tokenize the data (no chat template, a row it cannot render).

    `file` and `line` say where, when one row is the cause.
    """

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 exit_status: int = EXIT_PROBLEMS) -> None:
        super().__init__(message, exit_status)
        self.file = file
        self.line = line

    @property
    def located(self) -> str:
        """The message after the file and line it is about, when known."""
        if self.file and self.line:
            return f"{self.file}:{self.line}: {self.message}"
        return f"{self.file}: {self.message}" if self.file else self.message


def summarize_lengths(lengths: Sequence[int], max_seq_length: int) -> LengthStats:
    """min, median, p95, max of token counts, and how many exceed max_seq_length."""
    if not lengths:
        return LengthStats(rows=0, min=0, median=0, p95=0, max=0, total_tokens=0,
                           truncated_rows=0)
    ordered = sorted(lengths)
    rank = max(1, math.ceil(0.95 * len(ordered)))
    median = statistics.median(ordered)
    return LengthStats(
        rows=len(ordered),
        min=ordered[0],
        median=int(median) if float(median).is_integer() else median,
        p95=ordered[rank - 1],
        max=ordered[-1],
        total_tokens=sum(ordered),
        truncated_rows=sum(1 for n in ordered if n > max_seq_length),
    )


def measure_tokens(data: Path | str, model: Path | str,
                   max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
                   splits: Sequence[str] = ("train", "valid", "test"),
                   preview_line: int = 1,
                   timeout: float = DEFAULT_TIMEOUT_SECONDS,
                   cancelled: Callable[[], bool] | None = None) -> TokenStats:
    """Token statistics of the dataset folder `data` under `model`'s tokenizer.

    Runs the counting subprocess and waits for it (seconds: loading a tokenizer imports
    transformers); call it from a worker thread. `cancelled()`, polled every 0.1 s, stops it
    early (pass the worker's is_cancelled). Raises TokenStatsFailed when the model cannot
    tokenize the data, UserError when the subprocess fails or is stopped.
    """
    (result,) = measure_tokens_many([data], model, max_seq_length, splits, preview_line,
                                    timeout, cancelled)
    if isinstance(result, TokenStatsFailed):
        raise result
    return result


def row_token_lengths(model: Path | str, data: Path | str,
                      extra_config: dict[str, Any] | None = None, split: str = "train",
                      timeout: float = DEFAULT_TIMEOUT_SECONDS,
                      cancelled: Callable[[], bool] | None = None) -> list[int]:
    """Every row's token count in one split of the dataset folder, tokenized as training
    will (the run's *_feature settings in `extra_config` apply): what the memory checks
    need, to judge the longest row and the rows each max_seq_length would cut.

    mask_prompt changes which tokens train, not how many there are, so it plays no part.
    Raises UserError, with the file and line when one row is the cause.
    """
    (result,) = measure_tokens_many([data], model, splits=(split,), preview_line=0,
                                    row_lengths=True, extra_config=extra_config,
                                    timeout=timeout, cancelled=cancelled)
    if isinstance(result, TokenStatsFailed):
        raise UserError(result.located, result.exit_status)
    return list((result.lengths or {}).get(split, []))


def measure_tokens_many(datasets: Sequence[Path | str], model: Path | str,
                        max_seq_length: int = DEFAULT_MAX_SEQ_LENGTH,
                        splits: Sequence[str] = ("train", "valid", "test"),
                        preview_line: int = 1,
                        timeout: float = DEFAULT_TIMEOUT_SECONDS,
                        cancelled: Callable[[], bool] | None = None,
                        row_lengths: bool = False,
                        extra_config: dict[str, Any] | None = None,
                        ) -> list[TokenStats | TokenStatsFailed]:
    """measure_tokens for several folders with one subprocess (one tokenizer load).

    `preview_line` 0 skips the preview; `row_lengths` fills TokenStats.lengths; the
    *_feature keys of `extra_config` name the row keys, as for training. Returns, in order,
    each folder's TokenStats or the TokenStatsFailed that says why it has none. Raises
    TokenStatsFailed when the model itself is unusable.
    """
    command = python_command(TOKEN_STATS, "--model", str(model),
                             "--max-seq-length", str(max_seq_length),
                             "--splits", ",".join(splits), "--preview-line", str(preview_line))
    if row_lengths:
        command.append("--lengths")
    for name, key in feature_keys(extra_config or {}).items():
        command += ["--feature", f"{name}={key}"]
    for data in datasets:
        command += ["--data", str(data)]
    returncode, stdout, stderr = run_child(command, timeout=timeout, cancelled=cancelled,
                                           what="Counting tokens",
                                           timeout_hint="try a smaller dataset")
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if len(lines) == 1 and lines[0].get("fatal"):
        fatal = lines[0]
        raise TokenStatsFailed(fatal["error"], fatal.get("file"), fatal.get("line"),
                               EXIT_USAGE if returncode == EXIT_USAGE else EXIT_PROBLEMS)
    if len(lines) != len(datasets):
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"Token statistics failed (exit status {returncode}): {last}",
                        EXIT_PROBLEMS)
    results: list[TokenStats | TokenStatsFailed] = []
    for data in lines:
        if "error" in data:
            results.append(TokenStatsFailed(data["error"], data.get("file"), data.get("line")))
        else:
            results.append(TokenStats.from_json(data))
    return results

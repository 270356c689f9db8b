"""Token statistics: the counts training will see, from the model's own tokenizer and template."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zyquo_tui.cli.main import main
from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.token_stats import (
    TokenStats,
    TokenStatsFailed,
    measure_tokens,
    measure_tokens_many,
    row_token_lengths,
    summarize_lengths,
)
from zyquo_tui.resources import sample_data_dir

MAX_SEQ_LENGTH = 30  # cuts many sample chat rows, some completions rows, few text rows

# mlx-lm's own pipeline, start to finish: mlx_lm.load, load_local_dataset, CacheDataset, and
# the trainer's iterate_batches, whose `lengths` are what training really feeds the model.
REFERENCE = """
import json, sys, types
from pathlib import Path
from mlx_lm import load
from mlx_lm.tuner.datasets import CacheDataset, load_local_dataset
from mlx_lm.tuner.trainer import iterate_batches

model, tokenizer = load(sys.argv[1])
out = {}
for folder in sys.argv[2:]:
    args = types.SimpleNamespace(mask_prompt=False)
    splits = dict(zip(("train", "valid", "test"),
                      load_local_dataset(Path(folder), tokenizer, args)))
    lengths = {}
    for name, rows in splits.items():
        lengths[name] = [int(l[0, 1]) for _, l in iterate_batches(
            CacheDataset(rows), batch_size=1, max_seq_length=10**9)]
    mask = Path(folder).name != "text"  # mlx-lm refuses mask_prompt for text rows
    masked = load_local_dataset(Path(folder), tokenizer,
                                types.SimpleNamespace(mask_prompt=mask))[0]
    tokens, offset = masked.process(masked[0])
    out[folder] = {"lengths": lengths, "first_row": [len(tokens), offset]}
print(json.dumps(out))
"""


def start_reference(model: Path, folders: list[Path]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", REFERENCE, str(model), *map(str, folders)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


FOLDERS = [sample_data_dir() / kind for kind in ("chat", "completions", "text")]


@pytest.fixture(scope="module")
def measured(sample_models) -> tuple[list, dict]:
    """Our statistics of the sample datasets, and mlx-lm's own lengths for the same rows."""
    model = sample_models["zyquo-tiny"]
    reference = start_reference(model, FOLDERS)  # runs beside ours: two cores, half the wait
    ours = measure_tokens_many([*FOLDERS, sample_data_dir() / "preference"], model,
                               max_seq_length=MAX_SEQ_LENGTH, row_lengths=True)
    stdout, stderr = reference.communicate(timeout=300)
    assert reference.returncode == 0, stderr
    return ours, json.loads(stdout)


def test_statistics_match_mlx_lm_tokenization_of_the_same_rows(measured):
    ours, expected = measured
    for folder, stats in zip(FOLDERS, ours):
        assert isinstance(stats, TokenStats), stats
        assert stats.format == folder.name
        truth = expected[str(folder)]
        for split in ("train", "valid", "test"):
            assert stats.splits[split] == summarize_lengths(truth["lengths"][split],
                                                            MAX_SEQ_LENGTH), (folder, split)
            # iterate_batches orders rows by length: compare the counts, not their order.
            assert sorted(stats.lengths[split]) == sorted(truth["lengths"][split])
        assert stats.splits["train"].truncated_rows > 0
    assert ours[0].splits["train"].truncated_rows > ours[1].splits["train"].truncated_rows


def test_row_lengths_follow_the_run_s_feature_keys(measured, sample_models, tmp_path):
    """The memory checks' counts: the same route, with a run's prompt_feature and
    completion_feature naming the row keys, as training reads them."""
    folder = tmp_path / "renamed"
    folder.mkdir()
    for split in ("train", "valid"):
        rows = [json.loads(line) for line in
                (sample_data_dir() / "completions" / f"{split}.jsonl").read_text().splitlines()]
        (folder / f"{split}.jsonl").write_text("".join(
            json.dumps({"question": r["prompt"], "answer": r["completion"]}) + "\n"
            for r in rows))
    extra = {"prompt_feature": "question", "completion_feature": "answer", "seed_other": 1}

    lengths = row_token_lengths(sample_models["zyquo-tiny"], folder, extra)

    assert lengths == measured[0][1].lengths["train"]
    with pytest.raises(UserError, match=r"renamed/train.jsonl:1: Unsupported data format"):
        row_token_lengths(sample_models["zyquo-tiny"], folder, {})


def test_the_preview_row_is_split_where_mask_prompt_splits_it(measured):
    ours, expected = measured
    for folder, stats in zip(FOLDERS, ours):
        total, offset = expected[str(folder)]["first_row"]
        masked = sum(s.tokens for s in stats.preview.spans if s.kind == "masked")
        assert (stats.preview.tokens, masked) == (total, offset), folder


def test_the_preview_tells_the_masked_prompt_from_the_trained_completion(measured):
    completions = measured[0][1]
    first = json.loads((sample_data_dir() / "completions" / "train.jsonl").read_text()
                       .splitlines()[0])
    assert [span.kind for span in completions.preview.spans] == ["masked", "trained",
                                                                "truncated"]
    masked, trained, truncated = completions.preview.spans
    assert first["prompt"] in masked.text and first["prompt"] not in trained.text
    assert (trained.text + truncated.text).startswith(first["completion"])
    assert masked.tokens + trained.tokens == MAX_SEQ_LENGTH
    assert masked.tokens + trained.tokens + truncated.tokens == completions.preview.tokens


def test_text_rows_train_every_token_and_preference_rows_are_counted_too(measured):
    text, preference = measured[0][2], measured[0][3]
    assert [span.kind for span in text.preview.spans][0] == "trained"
    assert "every token trains" in text.note
    assert preference.format == "preference" and preference.splits["train"].rows == 225
    assert "prompt+chosen and prompt+rejected" in preference.note


def test_data_check_with_a_model_adds_token_statistics(tiny_model, capsys):
    folder = sample_data_dir() / "chat"
    assert main(["data", "check", str(folder), "--model", str(tiny_model),
                 "--max-seq-length", "40"]) == 0
    out = capsys.readouterr().out.splitlines()
    table = out.index("  SPLIT  ROWS  MIN  MEDIAN  P95  MAX  TRUNCATED")
    assert out[table + 1].split()[:2] == ["train", "225"]
    assert out[table + 4] == "train.jsonl:1 as mask_prompt trains it (25 tokens):"
    assert out[table + 5].split()[:2] == ["masked", "17"]
    assert out[table + 6].split()[:2] == ["trained", "8"]
    assert out[-1] == "valid: 0 errors, 0 warnings"


def test_a_model_without_a_chat_template_cannot_count_chat_rows_but_can_count_text(
        tiny_model, tmp_path, capsys):
    model = shutil.copytree(tiny_model, tmp_path / "no-template")
    config = json.loads((model / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    chat, text = measure_tokens_many([sample_data_dir() / "chat", sample_data_dir() / "text"],
                                     model)
    assert isinstance(chat, TokenStatsFailed)
    assert "no chat template" in chat.message
    assert (chat.file, chat.line) == (str(sample_data_dir() / "chat" / "train.jsonl"), 1)
    assert isinstance(text, TokenStats) and text.splits["train"].rows == 225


def test_token_statistics_are_skipped_while_the_data_has_errors(tiny_model, tmp_path, capsys):
    folder = tmp_path / "d"
    shutil.copytree(sample_data_dir() / "text", folder)
    with open(folder / "train.jsonl", "a") as file:
        file.write("{oops\n")
    assert main(["data", "check", str(folder), "--model", str(tiny_model), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["token_stats"] is None
    assert "fix them first" in data["token_stats_skipped"]


def test_a_folder_that_is_not_a_model_fails_with_usage_status(tmp_path):
    with pytest.raises(TokenStatsFailed) as raised:
        measure_tokens(sample_data_dir() / "text", tmp_path)
    assert raised.value.exit_status == 2 and "not a model folder" in raised.value.message


def test_cancelling_stops_the_subprocess_at_once(tiny_model, monkeypatch):
    children = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            children.append(self)
    monkeypatch.setattr(subprocess, "Popen", Recorded)
    with pytest.raises(UserError, match="cancelled"):
        measure_tokens(sample_data_dir() / "chat", tiny_model, cancelled=lambda: True)
    # Killed at the first poll, before it could load the tokenizer and finish on its own.
    assert [child.returncode for child in children] == [-signal.SIGKILL]


def test_summary_uses_the_middle_value_and_a_nearest_rank_p95():
    stats = summarize_lengths([5, 1, 3, 2, 4, 100, 6, 7, 8, 9], max_seq_length=8)
    assert (stats.rows, stats.min, stats.median, stats.p95, stats.max) == (10, 1, 5.5, 100, 100)
    assert (stats.total_tokens, stats.truncated_rows) == (145, 2)
    assert summarize_lengths(list(range(1, 21)), 100).p95 == 19
    assert summarize_lengths([], 10).rows == 0

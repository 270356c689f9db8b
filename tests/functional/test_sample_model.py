"""The sample datasets and the tiny offline models built from them.

The models are built in subprocesses (this process never imports mlx): the session's one build
with the teacher (conftest.py's full_sample_build), and the builds these tests make themselves.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE_DATA = REPO / "sample_data"
FORMATS = {
    "completions": {"prompt", "completion"},
    "chat": {"messages"},
    "text": {"text"},
    "preference": {"prompt", "chosen", "rejected"},
    "rl": {"prompt", "answer"},
}
# rl/train.jsonl is a few questions, each several times (sample_data/README.md).
RL_TRAIN_ROWS = 64
SPLITS = ("train", "valid", "test")
MODEL_FILES = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _build(models_dir: Path) -> dict:
    proc = _run("-m", "zyquo_tui.trainer.sample_model", str(models_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _python(code: str, *args: str, timeout: float = 300) -> dict:
    """Run code in a fresh interpreter; it prints one JSON object as its last line."""
    proc = _run("-c", code, *args, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def built(full_sample_build) -> dict:
    """The session's one build with the teacher (conftest.py): read, never written."""
    models = full_sample_build["models"]
    return {"dir": Path(models["zyquo-tiny"]).parent, "out": full_sample_build}


# ---------------------------------------------------------------------------------------------
# sample_data


def test_generate_matches_committed_files(tmp_path):
    proc = _run(str(SAMPLE_DATA / "generate.py"), str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    for fmt in FORMATS:
        for split in SPLITS:
            name = f"{fmt}/{split}.jsonl"
            assert (tmp_path / name).read_bytes() == (SAMPLE_DATA / name).read_bytes(), (
                f"sample_data/{name} differs from generate.py's output: rerun the script")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_sample_data_folders_have_splits_with_right_keys(fmt):
    folder = SAMPLE_DATA / fmt
    sizes = {}
    for split in SPLITS:
        rows = _read_rows(folder / f"{split}.jsonl")
        sizes[split] = len(rows)
        for row in rows:
            assert set(row) == FORMATS[fmt], row
            if fmt == "chat":
                roles = [m["role"] for m in row["messages"]]
                assert roles[-1] == "assistant"
                assert set(roles) <= {"system", "user", "assistant"}
                assert all(isinstance(m["content"], str) and m["content"] for m in row["messages"])
            else:
                assert all(isinstance(v, str) and v for v in row.values())
    assert 200 <= sizes["train"] <= 400 or (fmt == "rl" and sizes["train"] == RL_TRAIN_ROWS)
    assert sizes["valid"] == sizes["test"] == 40


def test_sample_splits_do_not_overlap():
    for fmt in FORMATS:
        seen = [{json.dumps(r, sort_keys=True) for r in _read_rows(SAMPLE_DATA / fmt / f"{s}.jsonl")}
                for s in SPLITS]
        assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])


# ---------------------------------------------------------------------------------------------
# the models


def test_build_prints_json_with_paths(built):
    out, models_dir = built["out"], built["dir"]
    assert set(out) == {"models", "sample_data"}
    assert Path(out["sample_data"]).resolve() == SAMPLE_DATA.resolve()
    assert set(out["models"]) == {"zyquo-tiny", "zyquo-tiny-4bit", "zyquo-tiny-teacher"}
    for name, path in out["models"].items():
        assert Path(path) == models_dir / name
        assert {p.name for p in Path(path).iterdir()} == MODEL_FILES
    # Nothing else (no temporary folders) is left beside them.
    assert sorted(p.name for p in models_dir.iterdir()) == ["zyquo-tiny", "zyquo-tiny-4bit",
                                                            "zyquo-tiny-teacher"]


def test_plain_output_is_one_path_per_line(tmp_path):
    proc = _run("-m", "zyquo_tui.trainer.sample_model", str(tmp_path / "m"), "--no-teacher")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(tmp_path / "m" / "zyquo-tiny"),
                                        str(tmp_path / "m" / "zyquo-tiny-4bit")]


def test_quantization_recorded_in_4bit_config(built):
    models = built["out"]["models"]
    config = json.loads((Path(models["zyquo-tiny-4bit"]) / "config.json").read_text())
    assert config["quantization"]["bits"] == 4
    assert config["hidden_size"] % config["quantization"]["group_size"] == 0
    assert config["quantization_config"] == config["quantization"]
    plain = json.loads((Path(models["zyquo-tiny"]) / "config.json").read_text())
    assert "quantization" not in plain
    assert plain["model_type"] == "llama"
    assert plain["vocab_size"] == 512


LOAD_BOTH = r"""
import json, sys
import mlx.core as mx
from mlx_lm import load
out = {}
for path in sys.argv[1:]:
    model, tok = load(path)
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is 2 plus 3?"},
            {"role": "assistant", "content": "2 plus 3 is 5."}]
    full = tok.apply_chat_template(msgs, return_dict=False)
    prompt = tok.apply_chat_template(msgs[:-1], add_generation_prompt=True, return_dict=False)
    logits = model(mx.array([full]))
    out[path] = {
        "layer": type(model.layers[0].self_attn.q_proj).__name__,
        "logits": list(logits.shape),
        "prompt_is_prefix": full[:len(prompt)] == prompt,
        "answer": tok.decode(full[len(prompt):]),
        "bos_first": full[0] == tok.bos_token_id and tok.encode("hi")[0] == tok.bos_token_id,
        "eos": sorted(tok.eos_token_ids),
        "pad": tok.pad_token,
    }
print(json.dumps(out))
"""


def test_mlx_lm_loads_both_models(built):
    models = built["out"]["models"]
    info = _python(LOAD_BOTH, models["zyquo-tiny"], models["zyquo-tiny-4bit"])
    plain, quant = info[models["zyquo-tiny"]], info[models["zyquo-tiny-4bit"]]
    assert plain["layer"] == "Linear"
    assert quant["layer"] == "QuantizedLinear"
    for one in (plain, quant):
        assert one["logits"][-1] == 512
        # mlx-lm's mask_prompt needs the prompt's tokens to be a prefix of the whole chat.
        assert one["prompt_is_prefix"]
        assert one["answer"] == "2 plus 3 is 5.<|im_end|>\n"
        assert one["bos_first"]
        assert len(one["eos"]) == 2
        assert one["pad"] == "<|pad|>"


TEACHER_LOSSES = """
import json, sys
import mlx.core as mx
from mlx_lm import load
from zyquo_tui.trainer import losses
from zyquo_tui.trainer.encoding import encode
rows = [json.loads(line) for line in open(sys.argv[3])]
out = {}
for path in sys.argv[1:3]:
    model, tok = load(path)
    tokens, lengths = encode(tok, [r["prompt"] for r in rows], [r["completion"] for r in rows],
                             False, 2048)
    out[path] = {"loss": losses.sft_objective(model, tokens, lengths)[0].item(),
                 "vocab": tok.get_vocab()}
print(json.dumps(out))
"""


def test_the_teacher_shares_the_tokenizer_and_has_learned_the_sample(built):
    models = built["out"]["models"]
    tiny, teacher = models["zyquo-tiny"], models["zyquo-tiny-teacher"]
    assert (Path(teacher) / "tokenizer.json").read_bytes() == \
        (Path(tiny) / "tokenizer.json").read_bytes()
    info = _python(TEACHER_LOSSES, tiny, teacher,
                   str(SAMPLE_DATA / "completions" / "valid.jsonl"))
    assert info[tiny]["vocab"] == info[teacher]["vocab"]
    # Held-out completions: the random student is near ln(512) = 6.2; the teacher knows them.
    assert info[teacher]["loss"] < 0.5 * info[tiny]["loss"], info


def test_rebuild_is_byte_identical_and_clean(built, tmp_path):
    models_dir = tmp_path / "models"  # a copy of the first build: the session's stays as it is
    shutil.copytree(built["dir"], models_dir)
    before = {p.relative_to(models_dir): p.read_bytes()
              for p in sorted(models_dir.rglob("*")) if p.is_file()}
    assert len(before) == 3 * len(MODEL_FILES)
    _build(models_dir)  # over the first build: replaces it
    after = {p.relative_to(models_dir): p.read_bytes()
             for p in sorted(models_dir.rglob("*")) if p.is_file()}
    assert after.keys() == before.keys()
    for name in before:
        assert after[name] == before[name], f"{name} changed between two builds"


def test_a_file_as_output_dir_is_one_sentence_and_exit_2(tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("x")
    for bad in (target, target / "below"):
        proc = _run("-m", "zyquo_tui.trainer.sample_model", str(bad), "--json")
        assert proc.returncode == 2
        assert proc.stdout == ""
        assert "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


TRAIN = r"""
import io, json, sys, types, contextlib
import numpy as np
from mlx_lm import load
from mlx_lm.lora import CONFIG_DEFAULTS, train_model
from mlx_lm.tuner.callbacks import TrainingCallback
from mlx_lm.tuner.datasets import load_dataset

class Record(TrainingCallback):
    def __init__(self):
        self.train, self.val = [], []
    def on_train_loss_report(self, info):
        self.train.append(info["train_loss"])
    def on_val_loss_report(self, info):
        self.val.append(info["val_loss"])

model_path, data, adapters, mask = sys.argv[1:5]
args = dict(CONFIG_DEFAULTS)
args.update(model=model_path, data=data, train=True, iters=50, batch_size=4, learning_rate=5e-4,
            num_layers=-1, steps_per_report=10, steps_per_eval=25, save_every=1000,
            adapter_path=adapters, mask_prompt=mask == "1")
args = types.SimpleNamespace(**args)
np.random.seed(args.seed)
model, tok = load(model_path)
train_set, valid_set, _ = load_dataset(args, tok)
record = Record()
with contextlib.redirect_stdout(io.StringIO()):
    train_model(args, model, train_set, valid_set, record)
print(json.dumps({"train": record.train, "val": record.val}))
"""


@pytest.mark.parametrize(
    "model,fmt,mask",
    [("zyquo-tiny", "completions", "0"), ("zyquo-tiny", "chat", "1"),
     ("zyquo-tiny-4bit", "chat", "0")],
)
def test_lora_loss_falls_on_sample(built, tmp_path, model, fmt, mask):
    path = built["out"]["models"][model]
    losses = _python(TRAIN, path, str(SAMPLE_DATA / fmt), str(tmp_path / "adapters"), mask)
    assert losses["val"][0] > 6.0
    assert losses["val"][-1] < losses["val"][0] - 2.0
    assert losses["train"][-1] < losses["train"][0] - 1.0
    assert (tmp_path / "adapters" / "adapters.safetensors").is_file()

"""Interchange with mlx-lm's YAML config: import any config, export one mlx-lm accepts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import SAMPLE_DATA, zyquo_cli

from zyquo_tui.core.runs.settings import Method
from zyquo_tui.core.store.store import RunStore

# Written in the style of mlx-lm's documented example (examples/lora_config.yaml).
EXAMPLE_STYLE = """\
# The path to the local model directory or Hugging Face repo.
model: "MODEL"
# Whether or not to train (boolean)
train: true
# The fine-tuning method: "lora", "dora", or "full".
fine_tune_type: dora
# The Optimizer with its possible inputs
optimizer: adamw
optimizer_config:
  adamw:
    betas: [0.9, 0.98]
    eps: 1e-6
    weight_decay: 0.05
# Directory with {train, valid, test}.jsonl files
data: "DATA"
seed: 7
num_layers: 2
batch_size: 2
iters: 12
val_batches: 2
learning_rate: 1e-5
steps_per_report: 4
steps_per_eval: 6
resume_adapter_file: null
adapter_path: "adapters"
save_every: 6
test: false
test_batches: 100
max_seq_length: 1024
grad_checkpoint: true
grad_accumulation_steps: 2
mask_prompt: true
lora_parameters:
  keys: ["self_attn.q_proj", "self_attn.v_proj"]
  rank: 4
  scale: 10.0
  dropout: 0.05
lr_schedule:
  name: cosine_decay
  warmup: 2
  warmup_init: 1e-7
  arguments: [1e-5, 12, 1e-7]
wandb: "my-project"
"""


def write_example(tmp_path, model) -> str:
    path = tmp_path / "lora_config.yaml"
    path.write_text(EXAMPLE_STYLE.replace("MODEL", str(model)).replace(
        "DATA", str(SAMPLE_DATA / "completions")))
    return str(path)


def test_a_misspelt_setting_is_kept_and_named_with_the_setting_it_may_mean(tiny_model,
                                                                          tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text(f"model: {tiny_model}\ndata: {SAMPLE_DATA / 'chat'}\n"
                      "learning_rat: 0.001\niters: 5\n")
    done = zyquo_cli("runs", "new", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert (f"note: {config}:3: learning_rat is not a setting this version models; it is kept "
            "and passed to mlx-lm unchanged (did you mean learning_rate?).") in done.stderr


def test_importing_an_example_style_config_keeps_every_key(tiny_model, tmp_path):
    done = zyquo_cli("runs", "import-config", write_example(tmp_path, tiny_model), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["unknown_keys"] == ["test", "test_batches", "wandb"]
    config = write_example(tmp_path, tiny_model)
    lines = Path(config).read_text().splitlines()
    for key in ("test", "test_batches", "wandb"):
        line = next(n for n, text in enumerate(lines, 1) if text.startswith(f"{key}:"))
        assert (f"note: {config}:{line}: {key} is not a setting this version models; it is "
                "kept and passed to mlx-lm unchanged.") in done.stderr
    run = RunStore().get(result["id"])
    hp = run.hyperparameters
    assert run.method is Method.DORA and run.model == str(tiny_model)
    assert hp.learning_rate == 1e-5 and isinstance(hp.learning_rate, float)
    assert hp.optimizer_config == {"adamw": {"betas": [0.9, 0.98], "eps": 1e-6,
                                             "weight_decay": 0.05}}
    assert hp.lr_schedule == {"name": "cosine_decay", "warmup": 2, "warmup_init": 1e-7,
                              "arguments": [1e-5, 12, 1e-7]}
    assert hp.lora_parameters == {"keys": ["self_attn.q_proj", "self_attn.v_proj"],
                                  "rank": 4, "scale": 10.0, "dropout": 0.05}
    assert (hp.seed, hp.num_layers, hp.batch_size, hp.iters, hp.grad_checkpoint,
            hp.grad_accumulation_steps, hp.mask_prompt, hp.max_seq_length) == (
        7, 2, 2, 12, True, 2, True, 1024)
    assert run.extra_config == {"test": False, "test_batches": 100, "wandb": "my-project"}


def test_an_exported_config_runs_under_mlx_lm_lora_and_matches_the_run(tiny_model, tmp_path):
    created = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data",
                        str(SAMPLE_DATA / "completions"), "--iters", "6", "--save-every", "3",
                        "--steps-per-eval", "3", "--val-batches", "2", "--rank", "4",
                        "--learning-rate", "1e-4", "--method", "dora", "--num-layers", "-1")
    run_id = created.stdout.strip()
    exported = tmp_path / "run.yaml"
    assert zyquo_cli("runs", "export-config", run_id, "-o", str(exported)).returncode == 0
    config = yaml.safe_load(exported.read_text())
    assert config["fine_tune_type"] == "dora" and config["lora_parameters"]["rank"] == 4

    done = subprocess.run([sys.executable, "-m", "mlx_lm", "lora", "-c", str(exported)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    written = json.loads((tmp_path / "adapters" / "adapter_config.json").read_text())
    assert (written["fine_tune_type"], written["iters"], written["learning_rate"],
            written["lora_parameters"]["rank"]) == ("dora", 6, 1e-4, 4)
    assert (tmp_path / "adapters" / "0000006_adapters.safetensors").is_file()

    reimported = zyquo_cli("runs", "import-config", str(exported), "--json")
    again = RunStore().get(json.loads(reimported.stdout)["id"])
    original = RunStore().get(run_id)
    assert again.hyperparameters == original.hyperparameters
    assert again.method is original.method


def test_a_file_that_is_not_yaml_is_one_sentence_with_its_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("model: m\ndata: d\nlora_parameters: {rank: 8\niters: 3\n")
    done = zyquo_cli("runs", "import-config", str(path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"zyquo-tui: {path}:")
    assert len(done.stderr.strip().splitlines()) == 1
    listed = zyquo_cli("runs", "list", "--json")
    assert json.loads(listed.stdout) == []


def test_a_config_with_a_bad_value_is_refused_with_the_reason(tiny_model, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(f"model: {tiny_model}\ndata: {SAMPLE_DATA / 'completions'}\n"
                    "num_layers: -1\nbatch_size: 0\n")
    done = zyquo_cli("runs", "import-config", str(path))
    assert done.returncode == 2 and "batch_size must be at least 1, not 0" in done.stderr
    assert json.loads(zyquo_cli("runs", "list", "--json").stdout) == []


def test_export_config_to_a_path_that_cannot_be_written_is_one_sentence(tiny_model, tmp_path):
    created = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data",
                        str(SAMPLE_DATA / "completions"), "--iters", "6", "--num-layers", "-1")
    run_id = created.stdout.strip()
    for target, reason in ((tmp_path / "no-such-folder" / "run.yaml", "No such file"),
                           (tmp_path, "Is a directory")):
        done = zyquo_cli("runs", "export-config", run_id, "-o", str(target))
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith(f"zyquo-tui: Cannot write the config to {target} (-o): "
                                      f"{reason}")
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_run_by_epochs_exports_both_and_imports_its_epochs_again(tiny_model, tmp_path):
    """The export holds the iterations (what `mlx_lm lora -c` trains) and zyquo_tui.epochs;
    imported, the epochs make the iterations again from the file's batch size."""
    created = zyquo_cli("runs", "new", "--model", str(tiny_model), "--data",
                        str(SAMPLE_DATA / "completions"), "--epochs", "2", "--batch-size", "5",
                        "--num-layers", "-1")
    assert created.returncode == 0, created.stderr
    exported = tmp_path / "run.yaml"
    assert zyquo_cli("runs", "export-config", created.stdout.strip(), "-o",
                     str(exported)).returncode == 0
    config = yaml.safe_load(exported.read_text())
    assert (config["iters"], config["zyquo_tui"]) == (90, {"epochs": 2})

    config["batch_size"] = 9  # 225 rows: 25 batches an epoch
    exported.write_text(yaml.safe_dump(config))
    done = zyquo_cli("runs", "import-config", str(exported), "--json")
    assert done.returncode == 0, done.stderr
    hp = RunStore().get(json.loads(done.stdout)["id"]).hyperparameters
    assert (hp.iters, hp.zyquo_tui) == (50, {"epochs": 2})


def test_mlx_lm_loras_epochs_key_is_read_as_mlx_lm_lora_reads_it(tiny_model, tmp_path):
    """mlx-lm-lora's top-level `epochs` trains by epochs when the config gives no iters; with
    iters, mlx-lm-lora ignores it, and so does the import, which keeps it and names it."""
    head = f"model: {tiny_model}\ndata: {SAMPLE_DATA / 'completions'}\nnum_layers: -1\n" \
           "batch_size: 5\nepochs: 3\n"
    alone, with_iters = tmp_path / "epochs.yaml", tmp_path / "both.yaml"
    alone.write_text(head + "iters: null\n")  # mlx-lm-lora's own default for iters
    with_iters.write_text(head + "iters: 20\n")

    done = zyquo_cli("runs", "import-config", str(alone), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["unknown_keys"] == []
    run = RunStore().get(result["id"])
    assert (run.hyperparameters.iters, run.hyperparameters.zyquo_tui) == (135, {"epochs": 3})

    done = zyquo_cli("runs", "import-config", str(with_iters), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["unknown_keys"] == ["epochs"] and "epochs" in done.stderr
    run = RunStore().get(result["id"])
    assert (run.hyperparameters.iters, run.hyperparameters.zyquo_tui) == (20, {})
    assert run.extra_config == {"epochs": 3}

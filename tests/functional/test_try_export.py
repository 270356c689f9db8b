"""After training: `runs try` (adapter and base side by side) and `runs export` (a checked fuse).

Real runs of the sample models are trained once for the session (conftest `trained_runs`)
and copied into each test's store; generation and export run as the real subprocesses.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA, zyquo_cli
from helpers import copy_run

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE
from zyquo_tui.core.processes import exports
from zyquo_tui.core.processes.try_session import shown_answer
from zyquo_tui.core.store.store import RunStore

COMPLETIONS = SAMPLE_DATA / "completions"
PROMPT = "What is 8 minus 7?"


def validation_loss(model: Path, adapter: Path | None = None, rows: int = 8) -> float:
    """The loss on the first validation rows, computed here with mlx-lm alone (not with the
    exporter's code): what `mlx_lm.load` makes of the folder."""
    import types

    from mlx_lm import load
    from mlx_lm.tuner.datasets import CacheDataset, create_dataset
    from mlx_lm.tuner.trainer import evaluate

    loaded, tokenizer = load(str(model), adapter_path=str(adapter) if adapter else None)
    lines = (COMPLETIONS / "valid.jsonl").read_text().splitlines()[:rows]
    data = CacheDataset(create_dataset([json.loads(line) for line in lines], tokenizer,
                                       types.SimpleNamespace(mask_prompt=False)))
    return evaluate(loaded, data, batch_size=1, num_batches=-1, max_seq_length=4096)


# -- try ------------------------------------------------------------------------------------------

def test_try_sample_answers_and_the_client_give_a_prompt_the_same_tokens(trained_runs,
                                                                         isolated_home):
    """The three doors to generation (`runs try`'s generator, a run's sample answers, the
    client's `sample()`) make a prompt's tokens one way and generate one way: greedily, the
    run's adapter at step 40 answers the same through each (the client's tokens read through
    mlx-lm's streaming detokenizer, as the other two write their text)."""
    from mlx_lm import load

    from zyquo_tui.client import TrainingClient
    from zyquo_tui.trainer.samples import SamplePrompt, Sampler

    run_id = copy_run(trained_runs["float"], isolated_home)
    done = zyquo_cli("runs", "try", run_id, "--prompt", PROMPT, "--max-tokens", "24", "--json",
                     "--no-base")
    assert done.returncode == 0, done.stderr
    tried = json.loads(done.stdout)
    assert tried["step"] == 40

    store = RunStore()
    model_path, adapters = store.get(run_id).model, store.adapters_dir(run_id)
    model, tokenizer = load(model_path, adapter_path=str(adapters))  # the latest: step 40
    asked = SamplePrompt(PROMPT, [{"role": "user", "content": PROMPT}], PROMPT)
    [(_, sampled)] = Sampler(model, tokenizer, [asked], 24).answers()

    with TrainingClient.from_model(model_path, method="lora") as client:
        client.load_state(adapters, step=40).result()
        result = client.sample([PROMPT], max_tokens=24, seed=5).result()
    detokenizer = tokenizer.detokenizer
    detokenizer.reset()
    for token in result.tokens[0]:
        detokenizer.add_token(token)
    detokenizer.finalize()

    assert len(set(result.tokens[0])) > 2, "an answer of one repeated token would prove little"
    assert tried["adapter"] == sampled == detokenizer.text
    assert result.texts[0] == tokenizer.decode(result.tokens[0])


def test_try_prints_different_adapter_and_base_answers_in_text_and_json(trained_runs,
                                                                       isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)

    text = zyquo_cli("runs", "try", run_id, "--prompt", PROMPT, "--max-tokens", "12")
    as_json = zyquo_cli("runs", "try", run_id, "--prompt", PROMPT, "--max-tokens", "12",
                        "--json")

    assert text.returncode == 0, text.stderr
    match = re.fullmatch(r"── adapter \(step 40\) ──\n(.*)\n── base ──\n(.*)\n", text.stdout,
                         re.DOTALL)
    assert match, text.stdout
    assert match.group(1) != match.group(2)
    assert as_json.returncode == 0, as_json.stderr
    answers = json.loads(as_json.stdout)
    assert set(answers) == {"adapter", "base", "step"} and answers["step"] == 40
    assert answers["adapter"] != answers["base"]
    # Temperature 0 is greedy: the text and the JSON say the same (the text without the
    # newlines around an answer, and an answer of newlines alone said to be empty).
    assert (shown_answer(answers["adapter"]), shown_answer(answers["base"])) == \
        (match.group(1), match.group(2))
    # The untrained sample base answers this prompt with newlines alone: the text says so.
    assert answers["base"] and not answers["base"].strip("\n")
    assert match.group(2) == "(an empty answer)"


def test_an_answer_of_newlines_alone_is_shown_as_empty():
    assert shown_answer("\n\n\n") == "(an empty answer)"
    assert shown_answer("\nOne.\n\n") == "One."
    assert shown_answer(" spaced ") == " spaced "


def test_try_an_earlier_step_without_the_base(trained_runs, isolated_home):
    run_id = copy_run(trained_runs["4bit"], isolated_home)

    done = zyquo_cli("runs", "try", run_id, "--step", "10", "--prompt", PROMPT,
                     "--max-tokens", "8", "--no-base", "--json")

    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert answers["step"] == 10 and answers["base"] is None and answers["adapter"]


def test_try_refuses_a_step_without_a_checkpoint_in_one_sentence(trained_runs, isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)

    done = zyquo_cli("runs", "try", run_id, "--step", "11", "--prompt", PROMPT)
    no_tokens = zyquo_cli("runs", "try", run_id, "--prompt", PROMPT, "--max-tokens", "0")

    assert done.returncode == EXIT_USAGE
    assert done.stderr.strip() == (f"zyquo-tui: Run {run_id} has no checkpoint at step 11; "
                                   "it has 10, 20, 30, 40.")
    assert no_tokens.returncode == EXIT_USAGE and "--max-tokens" in no_tokens.stderr
    for temperature in ("nan", "inf", "-1"):
        odd = zyquo_cli("runs", "try", run_id, "--prompt", PROMPT, "--temperature", temperature)
        assert odd.returncode == EXIT_USAGE, (temperature, odd.stdout)
        assert f"--temperature is {float(temperature)}; give 0" in odd.stderr


# -- export ---------------------------------------------------------------------------------------

def test_export_of_the_float_run_loads_and_keeps_the_adapter(trained_runs, isolated_home,
                                                             tmp_path):
    run_id = copy_run(trained_runs["float"], isolated_home)
    output = tmp_path / "exported" / "tiny-fused"

    done = zyquo_cli("runs", "export", run_id, "-o", str(output), "--json")

    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    assert job["state"] == "completed" and job["weights"] == "float" and job["step"] == 40
    assert job["check"]["passed"] and job["check"]["difference"] <= 1e-3
    check = job["check"]
    assert job["message"] == (
        f"{output} written (float); its validation loss {check['fused_loss']:.4f} is "
        f"{check['difference']:.4f} from base + adapter's {check['adapter_loss']:.4f} "
        f"({check['tolerance']:.4f} allowed; base alone: {check['base_loss']:.4f}).")
    adapters = isolated_home / "runs" / run_id / "adapters"
    assert validation_loss(output) == pytest.approx(
        validation_loss(Path(job["model"]), adapters), abs=1e-3)
    assert validation_loss(output) != pytest.approx(validation_loss(Path(job["model"])),
                                                    abs=0.1), "the adapter must be in it"
    # mlx-lm's own generate accepts it; the models list shows it (a link, as -o is elsewhere).
    generated = subprocess.run([sys.executable, "-m", "mlx_lm", "generate", "--model",
                                str(output), "--prompt", PROMPT, "--max-tokens", "4"],
                               capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert generated.returncode == 0, generated.stderr
    listed = json.loads(zyquo_cli("models", "--json").stdout)
    rows = listed["models"] if isinstance(listed, dict) else listed
    assert any(Path(m["path"]).resolve() == output.resolve() and m["status"] == "ready"
               for m in rows)
    assert not list(output.parent.glob(".*exporting*")), "no staging folder left behind"


def test_export_of_the_4bit_run_is_float_by_default_and_can_be_requantized(trained_runs,
                                                                           isolated_home):
    run_id = copy_run(trained_runs["4bit"], isolated_home)

    float_export = zyquo_cli("runs", "export", run_id, "--json")
    requantized = zyquo_cli("runs", "export", run_id, "--quantize", "4", "--json")

    assert float_export.returncode == 0, float_export.stderr
    job = json.loads(float_export.stdout)
    output = Path(job["output"])
    assert output.parent == isolated_home / "models" and job["listed_as"] is None
    assert job["weights"] == "float" and job["dequantize"]
    config = json.loads((output / "config.json").read_text())
    assert "quantization" not in config
    adapters = isolated_home / "runs" / run_id / "adapters"
    adapted = validation_loss(Path(job["model"]), adapters)
    assert validation_loss(output) == pytest.approx(adapted, abs=1e-3)

    assert requantized.returncode == 0, requantized.stderr
    job4 = json.loads(requantized.stdout)
    assert job4["weights"] == "4-bit" and job4["output"].endswith("-4bit")
    assert json.loads((Path(job4["output"]) / "config.json").read_text())[
        "quantization"]["bits"] == 4
    check = job4["check"]
    # The documented tolerance: within 1e-3 plus a quarter of the adapter's gain.
    assert check["tolerance"] == pytest.approx(
        1e-3 + 0.25 * abs(check["base_loss"] - check["adapter_loss"]))
    assert abs(validation_loss(Path(job4["output"])) - adapted) <= check["tolerance"]


def test_a_fuse_that_dropped_the_adapter_is_rejected_and_not_kept(trained_runs, isolated_home,
                                                                  tmp_path, monkeypatch):
    """mlx-lm issue 1172: a fuse can silently write the base's weights. Here the fuse step is
    made to do exactly that; the check must catch it, exit 1, and leave no model behind."""
    from zyquo_tui.trainer import export

    run_id = copy_run(trained_runs["float"], isolated_home)
    store = RunStore(isolated_home)
    run = store.get(run_id)
    output = tmp_path / "dropped"
    job = exports.ExportJob(id="20260101-000000-000-test", run_id=run_id, run_name=run.name,
                            step=40, model=run.model, adapters=str(store.adapters_dir(run_id)),
                            data=run.data, output=str(output), dequantize=False, quantize=None,
                            gguf=False)
    (isolated_home / "exports").mkdir()
    exports.save_job(isolated_home, job)

    def fuse_losing_the_adapter(adapted, job):
        adapted.use_base()  # the adapter's modules taken out: the base's weights, as written
        return adapted.model, dict(adapted.config)
    monkeypatch.setattr(export, "fuse_weights", fuse_losing_the_adapter)

    status = export.main([str(exports.job_path(isolated_home, job.id)), "--no-detach"])

    assert status == EXIT_PROBLEMS
    ended = exports.load_job(isolated_home, job.id)
    assert ended.state == exports.REJECTED and not ended.check["passed"]
    assert "the fuse lost the adapter" in ended.message and "not kept" in ended.message
    assert not output.exists() and not list(tmp_path.glob(".dropped*"))
    listed = zyquo_cli("runs", "exports", run_id)
    assert "rejected" in listed.stdout


def test_the_export_job_outlives_the_command_that_started_it(trained_runs, isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)

    started = zyquo_cli("runs", "export", run_id, "--no-wait", "--json")

    assert started.returncode == 0, started.stderr
    job = json.loads(started.stdout)
    assert job["state"] == "running"  # the command has ended; the job has not
    ended = exports.wait(isolated_home, job["id"])
    assert ended.state == exports.COMPLETED, ended.message
    assert ended.process["pid"] and ended.process["pid"] != job["process"].get("pid")
    listed = json.loads(zyquo_cli("runs", "exports", run_id, "--json").stdout)
    assert [j["state"] for j in listed] == ["completed"]


def test_an_exporter_that_died_is_reported_as_failed(isolated_home):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    job = exports.ExportJob(id="20260101-000000-000-dead", run_id="r", run_name="r", step=1,
                            model="m", adapters="a", data="d", output="o", dequantize=False,
                            quantize=None, gguf=False, process={"pid": dead.pid,
                                                                 "start_time": 1.0})
    (isolated_home / "exports").mkdir()
    exports.save_job(isolated_home, job)

    [listed] = exports.list_jobs(isolated_home)

    assert listed.state == exports.FAILED and "stopped without finishing" in listed.message


def test_exports_of_an_unknown_run_is_refused_as_other_commands_refuse_it(isolated_home):
    done = zyquo_cli("runs", "exports", "nope")

    assert done.returncode == EXIT_USAGE and done.stdout == ""
    assert done.stderr == f"zyquo-tui: There is no run nope in {isolated_home / 'runs'}; " \
                          "`zyquo-tui runs list` shows them.\n"
    # A deleted run's export jobs stay on record, and stay listed.
    job = exports.ExportJob(id="20260101-000000-000-gone", run_id="gone", run_name="gone",
                            step=1, model="m", adapters="a", data="d", output="o",
                            dequantize=False, quantize=None, gguf=False)
    (isolated_home / "exports").mkdir()
    exports.save_job(isolated_home, job)
    listed = zyquo_cli("runs", "exports", "gone", "--json")
    assert listed.returncode == 0
    assert [j["id"] for j in json.loads(listed.stdout)] == [job.id]


def test_export_refuses_bad_requests_in_one_sentence_and_starts_nothing(trained_runs,
                                                                       isolated_home, tmp_path):
    run_id = copy_run(trained_runs["float"], isolated_home)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file").write_text("x")
    other_model = tmp_path / "qwen-like"
    shutil.copytree(json.loads((trained_runs["float"] / "run.json").read_text())["model"],
                    other_model)
    config = json.loads((other_model / "config.json").read_text())
    (other_model / "config.json").write_text(json.dumps({**config, "model_type": "qwen2"}))
    other = copy_run(trained_runs["4bit"], isolated_home)
    record = json.loads((isolated_home / "runs" / other / "run.json").read_text())
    (isolated_home / "runs" / other / "run.json").write_text(
        json.dumps({**record, "model": str(other_model)}))

    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    unwritable = blocked / "sub" / "model"

    cases = {
        "exists": zyquo_cli("runs", "export", run_id, "-o", str(taken)),
        "unwritable": zyquo_cli("runs", "export", run_id, "-o", str(unwritable)),
        # a folder that exists but takes no files, even from root
        "no-files": zyquo_cli("runs", "export", run_id, "-o", "/proc/zyquo-model"),
        "both": zyquo_cli("runs", "export", run_id, "--dequantize", "--quantize", "8"),
        "gguf-quantized": zyquo_cli("runs", "export", run_id, "--gguf", "--quantize", "4"),
        "gguf-type": zyquo_cli("runs", "export", other, "--gguf"),
        "bits": zyquo_cli("runs", "export", run_id, "--quantize", "3"),
        "step": zyquo_cli("runs", "export", run_id, "--step", "7"),
    }

    for name, done in cases.items():
        assert done.returncode == EXIT_USAGE, (name, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "already exists" in cases["exists"].stderr
    # The folder the user named is the problem, not the store.
    assert f"(-o {unwritable})" in cases["unwritable"].stderr
    assert cases["unwritable"].stderr.strip().endswith("; give -o a folder you can write.")
    assert "ZYQUO_HOME" not in cases["unwritable"].stderr
    assert cases["no-files"].stderr.startswith(
        "zyquo-tui: Cannot write the exported model (-o /proc/zyquo-model) to "
        "/proc/zyquo-model: cannot create files in /proc (")
    assert cases["no-files"].stderr.strip().endswith("; give -o a folder you can write.")
    assert cases["gguf-type"].stderr.strip() == (
        "zyquo-tui: GGUF export is not supported for 'qwen2' models: mlx-lm converts only "
        "llama, mixtral, mistral; drop --gguf.")
    assert not (isolated_home / "exports").exists() or not list(
        (isolated_home / "exports").glob("*.json"))


def test_a_second_export_to_the_folder_one_is_writing_is_refused_at_once(trained_runs,
                                                                         isolated_home):
    """Two exports of one checkpoint to its default folder: the second used to start and fail
    minutes later ("Directory not empty"); it is refused before it starts, naming the first."""
    from zyquo_tui.core.errors import UserError

    run_id = copy_run(trained_runs["float"], isolated_home)
    store = RunStore()
    first = exports.start_export(store, run_id)
    try:
        with pytest.raises(UserError, match=f"Export {first.id} \\(run {run_id}\\) is "
                                            "writing .* now; wait for it"):
            exports.start_export(store, run_id)
        assert [job.id for job in exports.list_jobs(store.home)] == [first.id]
    finally:
        ended = exports.wait(store.home, first.id)
    assert ended.state == exports.COMPLETED, ended.message


def test_gguf_export_writes_the_file_for_a_llama_model(trained_runs, isolated_home):
    run_id = copy_run(trained_runs["float"], isolated_home)

    done = zyquo_cli("runs", "export", run_id, "--gguf", "--json")

    assert done.returncode == 0, done.stderr
    output = Path(json.loads(done.stdout)["output"])
    assert (output / "ggml-model-f16.gguf").stat().st_size > 0
    assert (output / "ggml-model-f16.gguf").read_bytes()[:4] == b"GGUF"
    assert json.loads(done.stdout)["message"].startswith(
        f"{output} written (float and ggml-model-f16.gguf); ")


def test_the_gguf_model_types_are_those_mlx_lm_fuse_converts():
    from zyquo_tui.core.library.models import mlx_lm_package_dir

    source = (mlx_lm_package_dir() / "fuse.py").read_text()
    listed = re.search(r"model_type not in \[([^\]]*)\]", source).group(1)
    assert tuple(re.findall(r'"(\w+)"', listed)) == exports.GGUF_MODEL_TYPES

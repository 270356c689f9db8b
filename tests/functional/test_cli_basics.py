"""The command line's skeleton: version, doctor, sample, listing, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import SAMPLE_DATA, zyquo_cli

from zyquo_tui import __version__


def test_version():
    done = zyquo_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"zyquo-tui {__version__}"


def test_doctor_reports_versions_device_memory_and_the_store(isolated_home):
    done = zyquo_cli("doctor", "--json")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["mlx"].startswith("0.") and facts["mlx_lm"].startswith("0.")
    assert facts["device"].startswith("Device(")
    assert facts["memory"]["total_bytes"] > facts["memory"]["available_bytes"] > 0
    assert facts["store"] == {"path": str(isolated_home), "exists": True, "writable": True,
                              "problem": None}
    assert facts["config"] == {"path": str(isolated_home / "config.toml"), "exists": False,
                               "problem": None}
    plain = zyquo_cli("doctor")
    assert "mlx-lm" in plain.stdout and str(isolated_home) in plain.stdout


def test_doctor_says_why_a_config_toml_the_commands_refuse_is_unusable_and_exits_1(
        isolated_home):
    (isolated_home / "config.toml").write_text("[runs]\nauto_resume = 3\n")
    refused = zyquo_cli("models")
    assert refused.returncode == 2
    sentence = refused.stderr.removeprefix("zyquo-tui: ").strip()
    assert sentence.startswith(f"{isolated_home / 'config.toml'}:2: [runs] auto_resume")

    done = zyquo_cli("doctor", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["config"]["problem"] == sentence
    plain = zyquo_cli("doctor")
    assert plain.returncode == 1 and f"config     NOT usable: {sentence}\n" in plain.stdout


def test_doctor_says_why_a_store_it_cannot_write_is_unusable_and_exits_1(monkeypatch):
    # /proc refuses new folders even to root, whose permission bits would say yes.
    monkeypatch.setenv("ZYQUO_HOME", "/proc/nope")
    done = zyquo_cli("doctor", "--json")
    assert done.returncode == 1
    store = json.loads(done.stdout)["store"]
    assert store["writable"] is False and store["problem"].startswith("cannot create files in")
    plain = zyquo_cli("doctor")
    assert plain.returncode == 1
    assert "/proc/nope (NOT usable: cannot create files in /proc" in plain.stdout
    assert "set ZYQUO_HOME to a folder you can write" in plain.stdout


def test_sample_builds_three_models_that_mlx_lm_loads(isolated_home):
    done = zyquo_cli("sample", "--json")
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    paths = [made["models"]["zyquo-tiny"], made["models"]["zyquo-tiny-4bit"],
             made["models"]["zyquo-tiny-teacher"]]
    assert all(p.startswith(str(isolated_home / "models")) for p in paths)
    code = ("import sys; from mlx_lm import load\n"
            "for p in sys.argv[1:]:\n"
            "    model, tok = load(p); print(type(model).__module__, len(model.layers))\n")
    loaded = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True,
                            text=True, check=True, stdin=subprocess.DEVNULL)
    # The distillation teacher is deeper (and wider) than the model it teaches.
    assert loaded.stdout.split("\n")[:3] == ["mlx_lm.models.llama 2"] * 2 + [
        "mlx_lm.models.llama 4"]


def test_runs_list_shows_damaged_runs_beside_good_ones(isolated_home, tiny_model):
    where = ("--model", str(tiny_model), "--data", str(SAMPLE_DATA / "completions"),
             "--num-layers", "-1")
    good = zyquo_cli("runs", "new", *where, "--name", "good one")
    assert good.returncode == 0, good.stderr
    bad = zyquo_cli("runs", "new", *where)
    bad_id = bad.stdout.strip()
    (isolated_home / "runs" / bad_id / "run.json").write_text("{truncated")
    listing = json.loads(zyquo_cli("runs", "list", "--json").stdout)
    assert [r["state"] for r in listing] == ["configured", "damaged"]
    assert "not valid JSON" in listing[1]["damaged"]
    plain = zyquo_cli("runs", "list")
    assert plain.returncode == 0 and "damaged" in plain.stdout and "good one" in plain.stdout
    # Every other command names the way out; delete, asked, removes it and only it.
    shown = zyquo_cli("runs", "show", bad_id)
    assert shown.returncode == 2 and f"`zyquo-tui runs delete {bad_id}` removes" in shown.stderr
    deleted = zyquo_cli("runs", "delete", bad_id)
    assert deleted.returncode == 0, deleted.stderr
    assert "its run.json was damaged" in deleted.stdout
    assert not (isolated_home / "runs" / bad_id).exists()
    assert [r["state"] for r in json.loads(zyquo_cli("runs", "list", "--json").stdout)] == [
        "configured"]


def _one_sentence_exit_2(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_an_unknown_command_is_one_sentence_and_exit_2():
    message = _one_sentence_exit_2(zyquo_cli("frobnicate"))
    assert "invalid choice" in message


def test_an_unknown_flag_names_the_help_of_the_command_it_was_given_to():
    message = _one_sentence_exit_2(zyquo_cli("runs", "new", "--bogus-flag", "1"))
    assert message == ("zyquo-tui: unrecognized arguments: --bogus-flag 1; see "
                       "`zyquo-tui runs new --help`.")
    assert _one_sentence_exit_2(zyquo_cli("data", "check", "x", "--bogus")).endswith(
        "see `zyquo-tui data check --help`.")
    assert _one_sentence_exit_2(zyquo_cli("--bogus")).endswith("see `zyquo-tui --help`.")


def test_an_unusable_store_location_is_one_sentence_and_exit_2(tmp_path, tiny_model):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    env = {**os.environ, "ZYQUO_HOME": str(blocker / "home")}
    done = subprocess.run([sys.executable, "-m", "zyquo_tui", "runs", "new", "--model",
                           str(tiny_model), "--data", str(SAMPLE_DATA / "completions"),
                           "--num-layers", "-1"], capture_output=True, text=True, env=env)
    assert "a file stands where" in _one_sentence_exit_2(done)
    if os.geteuid() != 0:  # root can write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        env["ZYQUO_HOME"] = str(locked / "home")
        done = subprocess.run([sys.executable, "-m", "zyquo_tui", "sample"],
                              capture_output=True, text=True, env=env)
        assert "permission denied" in _one_sentence_exit_2(done)


def test_a_file_where_the_runs_folder_should_be_leaves_other_files_alone(isolated_home):
    isolated_home.mkdir(exist_ok=True)
    (isolated_home / "runs").write_text("precious")
    message = _one_sentence_exit_2(zyquo_cli("runs", "list"))
    assert "is a file" in message
    assert (isolated_home / "runs").read_text() == "precious"

"""Replica measurements kept per store (core/memory/replica_cache.py): what a key depends on,
and a file that is damaged or cannot be written costs a measurement, never a verdict."""

from __future__ import annotations

import os

from zyquo_tui.core.memory import replica_cache
from zyquo_tui.core.memory.replica_cache import CACHE_FILE, ReplicaCache, measurement_key

SPEC = {"model": "m", "method": "lora", "steps": 3, "synthetic_tokens": 64,
        "extra_config": {}, "scratch": "/tmp/zyquo-measure-1",
        "hyperparameters": {"batch_size": 4, "max_seq_length": 2048, "iters": 1000,
                            "learning_rate": 1e-5, "seed": 0, "save_every": 100}}


def model_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 64}')
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_a_kept_measurement_answers_the_same_spec_on_the_same_files(tmp_path):
    folder = model_folder(tmp_path)
    cache = ReplicaCache(tmp_path / "home")
    key = measurement_key(SPEC, str(folder))
    assert cache.get(key) is None
    cache.put(key, {"peak_memory_bytes": 7301660, "seconds": 2.9})
    kept = ReplicaCache(tmp_path / "home").get(key)  # another process reads the file
    assert kept["peak_memory_bytes"] == 7301660 and kept["measured_at"]
    assert (tmp_path / "home" / CACHE_FILE).is_file()


def test_what_never_reaches_a_step_does_not_change_the_key_and_the_rest_does(tmp_path):
    folder = str(model_folder(tmp_path))
    key = measurement_key(SPEC, folder)

    def with_settings(**changed):
        return {**SPEC, "hyperparameters": {**SPEC["hyperparameters"], **changed}}

    # How long a run is, its learning rate, seed and checkpoints; the scratch folder.
    assert measurement_key(with_settings(iters=4, learning_rate=1e-3, seed=7, save_every=2),
                           folder) == key
    assert measurement_key({**SPEC, "scratch": "/tmp/other"}, folder) == key
    # What the step trains.
    assert measurement_key(with_settings(batch_size=8), folder) != key
    assert measurement_key({**SPEC, "synthetic_tokens": 65}, folder) != key
    assert measurement_key({**SPEC, "method": "dora"}, folder) != key


def test_a_changed_model_file_or_mlx_changes_the_key(tmp_path, monkeypatch):
    folder = model_folder(tmp_path)
    key = measurement_key(SPEC, str(folder))
    (folder / "tokenizer.json").write_text('{"changed": true}')  # not read by a replica
    assert measurement_key(SPEC, str(folder)) == key
    weights = folder / "model.safetensors"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    moved = measurement_key(SPEC, str(folder))
    assert moved != key
    monkeypatch.setattr(replica_cache, "_version",
                        lambda package: "0.0.0" if package == "mlx" else None)
    assert measurement_key(SPEC, str(folder)) != moved


def test_a_damaged_line_is_skipped_and_the_newest_entry_answers(tmp_path):
    cache = ReplicaCache(tmp_path)
    cache.put("k", {"peak_memory_bytes": 1})
    with open(tmp_path / CACHE_FILE, "a", encoding="utf-8") as handle:
        handle.write('{"key": "k", "result": {"peak_memory_bytes": 2}\n')  # cut short
        handle.write('["not", "an", "entry"]\n')
    cache.put("k", {"peak_memory_bytes": 3})
    assert cache.get("k")["peak_memory_bytes"] == 3
    assert cache.get("other") is None


def test_a_home_that_cannot_be_written_measures_again_without_failing(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a home below a file: even root cannot create it
    cache = ReplicaCache(blocked / "home")
    cache.put("k", {"peak_memory_bytes": 1})
    assert cache.get("k") is None


def test_the_file_keeps_the_newest_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(replica_cache, "KEEP_ENTRIES", 2)
    cache = ReplicaCache(tmp_path)
    for number in range(6):
        cache.put(f"k{number}", {"peak_memory_bytes": number})
    lines = (tmp_path / CACHE_FILE).read_text().splitlines()
    assert len(lines) <= 2 * 2
    assert cache.get("k5")["peak_memory_bytes"] == 5 and cache.get("k0") is None
    assert not [path for path in tmp_path.iterdir() if ".tmp" in path.name]  # none left


def test_only_this_interpreters_measurements_are_kept(tmp_path, monkeypatch):
    """measure_replica with the cache: a spec measured once is answered from the file (with
    when it was measured); one measured by another Python, which may hold another MLX, is
    neither kept nor answered from it; cached_only measures nothing."""
    import json

    from test_memory import write_model

    from zyquo_tui.core.memory import measure as measure_module
    from zyquo_tui.core.memory.estimate import TrainingConfig
    from zyquo_tui.core.memory.facts import ModelFacts
    from zyquo_tui.core.memory.replica import Replica
    from zyquo_tui.core.runs.settings import Method

    folder = write_model(tmp_path / "model")
    facts = ModelFacts.from_folder(folder)
    config = TrainingConfig(method=Method.LORA, batch_size=2, max_seq_length=64, num_layers=-1,
                            longest_row_tokens=64)
    replica = Replica.whole(json.loads((folder / "config.json").read_text()), config)
    measured = []

    def measuring(command, spec, timeout, cancelled):
        measured.append(command)
        return {"peak_memory_bytes": 5_000_000, "model_weights_bytes": 1_000_000,
                "seconds": 2.5, "device": "Device(cpu, 0)"}

    monkeypatch.setattr(measure_module, "_subprocess_json", measuring)
    cache = ReplicaCache(tmp_path / "home")

    def measure(**options):
        return measure_module.measure_replica(str(folder), facts, config, replica, cache=cache,
                                              **options)

    assert measure(cached_only=True) is None and measured == []
    first = measure()
    again = measure()
    assert len(measured) == 1
    assert first.measured_at is None and again.measured_at
    assert again.peak_bytes == first.peak_bytes
    elsewhere = measure(python="/opt/other/bin/python")
    assert len(measured) == 2 and elsewhere.measured_at is None
    assert len((tmp_path / "home" / CACHE_FILE).read_text().splitlines()) == 1

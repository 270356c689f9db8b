"""SetupSources: where the setup screens get their facts, in one replaceable object.

The new-run, models, datasets and machine screens read models, datasets, validation reports,
token counts, memory budgets, the store's free disk, measured peaks, duration estimates and
machine figures through
this class and
nothing else, so tests (and the snapshots) swap in fixed figures by subclassing it. Every
method may block (files, subprocesses): the screens call them from worker threads.

The App keeps one instance (`setup_sources(app)`), so validation reports survive moving
between screens; a report is reused only while the dataset's files are unchanged.
"""

from __future__ import annotations

import os
import platform
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.protocol import last_event
from zyquo_tui.core.library.datasets import (
    SPLITS,
    DatasetInfo,
    DatasetReport,
    discover_datasets,
    validate_dataset,
)
from zyquo_tui.core.library.gguf_files import GGUFFile, discover_gguf_files
from zyquo_tui.core.library.models import ModelInfo, discover_models, model_search_roots
from zyquo_tui.core.library.token_stats import (
    TokenStats,
    measure_tokens,
    row_token_lengths,
)
from zyquo_tui.core.memory.advisor import MemoryAdvisor
from zyquo_tui.core.memory.budget import MemoryBudget, budget_from, cached_probe
from zyquo_tui.core.memory.duration import DurationEstimate, estimate_duration
from zyquo_tui.core.memory.estimate import Estimate, TrainingConfig
from zyquo_tui.core.memory.facts import ModelFacts
from zyquo_tui.core.memory.measure import Measurement, measure_peak
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.runs.settings import Hyperparameters, Method
from zyquo_tui.core.store.known_hosts import load_known_hosts
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.core.system import machine
from zyquo_tui.core.system.disk_space import free_bytes
from zyquo_tui.core.system.liveness import is_alive

_UNREAD = object()


@dataclass
class TrainerUse:
    """What the trainer of an active run holds in memory now (its process and children)."""

    run_id: str
    run_name: str
    pid: int
    rss_bytes: int
    # The peaks its last train event reported: MLX's, and the trainer's resident footprint's.
    peak_memory_bytes: int | None = None
    peak_rss_bytes: int | None = None


@dataclass
class MachineReading:
    """One look at the machine, for the machine panel. None where it cannot be read here."""

    platform: str  # "macOS", "Linux", ...
    total_bytes: int
    available_bytes: int
    swap_used_bytes: int
    swap_total_bytes: int | None
    budget: MemoryBudget | None
    cpu_load: float | None  # 1-minute load average
    cpu_count: int | None
    free_percent: int | None = None  # macOS memory_pressure
    gpu: machine.GpuUse | None = None
    gpu_note: str = ""  # why there is no GPU figure
    trainers: list[TrainerUse] = field(default_factory=list)


def trainer_use(run: Run, events: Path | None = None) -> TrainerUse | None:
    """Resident memory of an active run's trainer (pid plus start time, as liveness checks
    it), with its children: on macOS the recorded pid is caffeinate's, the trainer its child;
    and the peaks the last train event of `events` (the run's events.jsonl) reported."""
    process_record = run.process or {}
    pid = process_record.get("pid")
    if not pid:
        return None
    if not is_alive(int(pid), process_record.get("start_time"), None,
                    process_record.get("boot_time")):
        return None  # ended, or the pid was reused by another process
    try:
        process = psutil.Process(int(pid))
        rss = process.memory_info().rss
        for child in process.children(recursive=True):
            try:
                rss += child.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None
    train = last_event(events, ev.TRAIN) if events is not None else None
    return TrainerUse(run.id, run.name, int(pid), int(rss),
                      peak_memory_bytes=(train or {}).get("peak_memory_bytes"),
                      peak_rss_bytes=(train or {}).get("peak_rss_bytes"))


class SetupSources:
    """The facts behind the setup screens (see the module docstring)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.known_models: list[ModelInfo] | None = None  # the last discovery's result
        self._probe: Any = _UNREAD
        self._reports: dict[str, tuple[tuple, DatasetReport]] = {}
        self._lengths: dict[tuple, list[int]] = {}
        self._token_stats: dict[tuple, tuple[tuple, TokenStats]] = {}
        self._lock = threading.Lock()

    # -- models and datasets ------------------------------------------------------------------

    def models(self) -> list[ModelInfo]:
        found = discover_models(self.home)
        self.known_models = found
        return found

    def gguf_files(self) -> list[GGUFFile]:
        """The GGUF files `zyquo-tui models import` can make into models (LM Studio, Ollama)."""
        return discover_gguf_files()

    def search_folders(self) -> list[tuple[str, str, bool]]:
        """(folder, source, exists) of every folder searched for models."""
        return [(str(root.path), root.source, root.path.is_dir())
                for root in model_search_roots(self.home)]

    def datasets(self, extra: Iterable[Path | str] = ()) -> list[DatasetInfo]:
        return discover_datasets(self.home, extra)

    def validation(self, path: str) -> DatasetReport:
        """The dataset's validation report, reused while its files are unchanged.

        Validated with a batch size of 1: the batch-size checks belong to the form, which
        knows the batch size the user is typing.
        """
        stamp = _files_stamp(Path(path))
        with self._lock:
            cached = self._reports.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        report = validate_dataset(path, batch_size=1)
        with self._lock:
            self._reports[path] = (stamp, report)
        return report

    def cached_validation(self, path: str) -> DatasetReport | None:
        """A report already made for this path (unchanged files), without validating."""
        with self._lock:
            cached = self._reports.get(path)
        if cached is not None and cached[0] == _files_stamp(Path(path)):
            return cached[1]
        return None

    # -- tokens ---------------------------------------------------------------------------------

    def token_lengths(self, model: str, data: str, extra_config: dict[str, Any],
                      mask_prompt: bool, cancelled: Callable[[], bool] | None = None
                      ) -> list[int]:
        """Every train row's token count under the model's tokenizer (a subprocess, seconds;
        remembered for the session while the dataset's files are unchanged). `cancelled()`
        turning true stops the subprocess. mask_prompt does not change the counts (see
        row_token_lengths); it stays in the signature the screens call."""
        key = (model, data, repr(sorted(extra_config.items())), _files_stamp(Path(data)))
        with self._lock:
            known = self._lengths.get(key)
        if known is not None:
            return list(known)
        lengths = row_token_lengths(model, data, extra_config, cancelled=cancelled)
        with self._lock:
            self._lengths[key] = list(lengths)
        return lengths

    def token_stats(self, data: str, model: str, max_seq_length: int, preview_line: int,
                    cancelled: Callable[[], bool]) -> TokenStats:
        return measure_tokens(data, model, max_seq_length=max_seq_length,
                              preview_line=preview_line, cancelled=cancelled)

    def counted_token_stats(self, data: str, model: str, max_seq_length: int,
                            preview_line: int, cancelled: Callable[[], bool]) -> TokenStats:
        """token_stats, remembered for the session while the dataset's files and the model's
        are unchanged: the datasets screen asks again at every `[` `]`, and a subprocess
        takes seconds."""
        found = self.cached_token_stats(data, model, max_seq_length, preview_line)
        if found is not None:
            return found
        stamp = _files_stamp(Path(data)) + _folder_stamp(Path(model))
        stats = self.token_stats(data, model, max_seq_length, preview_line, cancelled)
        with self._lock:
            self._token_stats[(data, model, max_seq_length, preview_line)] = (stamp, stats)
        return stats

    def cached_token_stats(self, data: str, model: str, max_seq_length: int,
                           preview_line: int) -> TokenStats | None:
        """Statistics already counted for exactly these (files unchanged), without counting."""
        with self._lock:
            cached = self._token_stats.get((data, model, max_seq_length, preview_line))
        if cached is not None and cached[0] == (_files_stamp(Path(data))
                                                + _folder_stamp(Path(model))):
            return cached[1]
        return None

    # -- memory ---------------------------------------------------------------------------------

    def advisor(self) -> MemoryAdvisor:
        """This machine's budget (the MLX probe is cached per machine; the first one takes
        seconds) and its measured history, including finished runs of the store."""
        advisor = MemoryAdvisor.for_machine(self.home)
        try:
            advisor.history.import_runs(RunStore(self.home).iter_runs())
        except Exception:  # a store that cannot be read costs the correction, nothing more
            pass
        return advisor

    def known_hosts(self) -> dict[str, dict[str, Any]]:
        """Other hosts' free memory as `hosts check` last found it (a distributed run's
        verdict per host)."""
        return load_known_hosts(self.home)

    def disk(self) -> tuple[int | None, Settings]:
        """Free bytes on the store's disk and the settings that hold its floor (the disk
        verdict beside the memory one)."""
        try:
            settings = Settings.load(self.home)
        except UserError:
            settings = Settings()  # a broken config.toml is said where it is used
        return free_bytes(self.home), settings

    def duration(self, model: str, facts: ModelFacts, method: Method, hp: Hyperparameters,
                 data: str | None, lengths: list[int] | None,
                 measured_tokens_per_second: float | None) -> DurationEstimate:
        """How long the run would take here, from the store's nearest finished run (or a
        measured speed): what `plan --json` calls duration_seconds and its basis."""
        return estimate_duration(RunStore(self.home), model, facts, method, hp, data, lengths,
                                 measured_tokens_per_second)

    def measure(self, model: str, config: TrainingConfig, *, data: str | None,
                hyperparameters: Hyperparameters, extra_config: dict[str, Any],
                cancelled: Callable[[], bool] | None = None) -> Measurement:
        return measure_peak(model, config, data=data, hyperparameters=hyperparameters,
                            extra_config=extra_config, cancelled=cancelled)

    measures_replicas = True  # the form judges by a replica once measured

    def replica(self, advisor: MemoryAdvisor, model: ModelFacts, estimate: Estimate, *,
                hyperparameters: Hyperparameters, extra_config: dict[str, Any],
                cancelled: Callable[[], bool] | None = None
                ) -> tuple[Estimate | None, str | None]:
        """The estimate judged by its config's replica (core/memory/replica.py), measured now,
        or None and why not: `advisor.replica_estimate`, as `plan` measures it."""
        return advisor.replica_estimate(model, estimate, hyperparameters=hyperparameters,
                                        extra_config=extra_config, cancelled=cancelled)

    # -- the machine ----------------------------------------------------------------------------

    def machine(self, active_runs: Sequence[Run] = ()) -> MachineReading:
        facts = machine.memory_facts()
        swap = psutil.swap_memory()
        try:
            if self._probe is _UNREAD:  # once a session: a failed probe is not retried
                self._probe = cached_probe(self.home)  # every two seconds
            budget = budget_from(self._probe, total_bytes=facts.total_bytes,
                                 available_bytes=facts.available_bytes,
                                 wired_limit=facts.wired_limit_bytes)
        except Exception:
            budget = None
        gpu = machine.gpu_use() if machine.IS_MACOS else None
        if not machine.IS_MACOS:
            note = "Linux: MLX trains on the CPU here" if platform.system() == "Linux" \
                else "not a Mac"
        elif gpu is None:
            note = "install macmon (brew install macmon) to see GPU use without sudo"
        else:
            note = ""
        store = RunStore(self.home)
        trainers = [use for use in (trainer_use(run, store.events_path(run.id))
                                    for run in active_runs) if use]
        return MachineReading(
            platform="macOS" if machine.IS_MACOS else platform.system(),
            total_bytes=facts.total_bytes, available_bytes=facts.available_bytes,
            swap_used_bytes=facts.swap_used_bytes, swap_total_bytes=int(swap.total),
            budget=budget, cpu_load=machine.cpu_load(), cpu_count=os.cpu_count(),
            free_percent=facts.free_percent, gpu=gpu, gpu_note=note, trainers=trainers)


def _files_stamp(folder: Path) -> tuple:
    files = [folder] if folder.is_file() else [folder / f"{s}.jsonl" for s in SPLITS]
    stamp = []
    for file in files:
        try:
            stat = file.stat()
        except OSError:
            continue
        stamp.append((file.name, stat.st_mtime_ns, stat.st_size))
    return tuple(stamp)


def _folder_stamp(folder: Path) -> tuple:
    """The files directly in a model folder: its tokenizer and chat template among them."""
    try:
        return tuple(sorted((entry.name, stat.st_mtime_ns, stat.st_size)
                            for entry in os.scandir(folder) if entry.is_file()
                            for stat in (entry.stat(),)))
    except OSError:
        return ()


def setup_sources(app: Any) -> SetupSources:
    """The App's SetupSources, made on first use (tests set `app.setup_sources` first)."""
    sources = getattr(app, "setup_sources", None)
    if sources is None:
        sources = SetupSources(app.store.home)
        app.setup_sources = sources
    return sources


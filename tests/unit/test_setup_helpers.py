"""What the setup tests share: the sample models in the store, sources with fixed figures,
and waiting for the new-run screen to settle. (Its one test checks the fixed sources.)"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.memory.advisor import MemoryAdvisor
from zyquo_tui.core.memory.budget import MemoryBudget
from zyquo_tui.core.memory.history import MemoryHistory
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.core.system.machine import GpuUse
from zyquo_tui.dashboard.notify import NotificationSettings
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen
from zyquo_tui.dashboard.setup_sources import MachineReading, SetupSources, TrainerUse

GIB = 1 << 30
QUIET = NotificationSettings(desktop="off", bell=False)


def setup_dashboard(sources_factory=None):
    """The real App, quiet, polling fast; `sources_factory(home)` replaces its SetupSources."""
    from zyquo_tui.dashboard.app import ZyquoApp

    app = ZyquoApp(notifications=QUIET, poll_interval=0.3)
    if sources_factory is not None:
        app.setup_sources = sources_factory(app.store.home)
    return app


def install_models(home: Path, sample_models: dict[str, Path]) -> dict[str, Path]:
    """Copy the sample models into $ZYQUO_HOME/models, where discovery finds them."""
    target = home / "models"
    target.mkdir(parents=True, exist_ok=True)
    placed = {}
    for name, folder in sample_models.items():
        shutil.copytree(folder, target / name, dirs_exist_ok=True)
        placed[name] = target / name
    return placed


FIXED_DISK_FREE = 412 * GIB


class FixedSources(SetupSources):
    """Real discovery and validation; a fixed budget, row lengths and machine figures."""

    def __init__(self, home: Path, *, budget: int = 8 * GIB, lengths: list[int] | None = None,
                 count_rows: bool = False, replicas: bool = False) -> None:
        super().__init__(home)
        self.measures_replicas = replicas  # True: measure them (a subprocess), as the app does
        self.budget = budget
        self.lengths = lengths
        self.count_rows = count_rows  # True: count with the real tokenizer (a subprocess)
        self.measured: list = []

    def advisor(self) -> MemoryAdvisor:
        return MemoryAdvisor(MemoryBudget.fixed(self.budget, available_bytes=self.budget,
                                                total_bytes=2 * self.budget),
                             history=MemoryHistory())

    def token_lengths(self, model, data, extra_config, mask_prompt, cancelled=None):
        if self.count_rows:
            return super().token_lengths(model, data, extra_config, mask_prompt, cancelled)
        if self.lengths is None:
            raise UserError("not counted in this test")
        return list(self.lengths)

    def machine(self, active_runs=()) -> MachineReading:
        return fixed_machine()


    def disk(self):
        return FIXED_DISK_FREE, Settings()  # a fixed free space: snapshots stay the same


def fixed_machine() -> MachineReading:
    """A 64 GB Mac mini in the middle of a run: the machine panel's snapshot figures."""
    return MachineReading(
        platform="macOS", total_bytes=64 * GIB, available_bytes=41 * GIB,
        swap_used_bytes=int(1.2 * GIB), swap_total_bytes=4 * GIB,
        budget=MemoryBudget(device="gpu", budget_bytes=48 * GIB,
                            budget_source="Metal's recommended working set",
                            total_bytes=64 * GIB, available_bytes=41 * GIB,
                            used_by_others_bytes=23 * GIB),
        cpu_load=2.15, cpu_count=10, free_percent=63,
        gpu=GpuUse(gpu_percent=41.0, gpu_mhz=1398, gpu_watts=12.3, total_watts=18.0),
        trainers=[TrainerUse("20251129-091500-000-c3d4", "support-chat dora", 4242,
                             int(3.1 * GIB), peak_memory_bytes=int(2.8 * GIB),
                             peak_rss_bytes=int(3.3 * GIB))])


async def until(pilot, predicate, what, timeout: float = 60.0) -> None:
    """Wait for `predicate`; `what` (text, or a callable giving it) names it on a timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            stack = " > ".join(type(screen).__name__ for screen in pilot.app.screen_stack)
            raise AssertionError(f"timed out after {timeout} s waiting for "
                                 f"{what() if callable(what) else what} (screens: {stack})")
        await pilot.pause(0.05)


async def open_new_run(pilot, **kwargs) -> NewRunScreen:
    """Push the new-run screen and wait until its lists and budget are read."""
    screen = NewRunScreen(**kwargs)
    pilot.app.push_screen(screen)
    await until(pilot, lambda: screen.ready and screen.advisor is not None,
                "the new-run screen to read models, datasets and the budget")
    await pilot.pause()
    return screen


async def settle(pilot, screen: NewRunScreen, timeout: float = 60.0) -> None:
    """Wait for the dataset check and the row count in flight (the setup service's work)."""
    await until(pilot, lambda: all(w.is_finished for w in screen.setup.workers),
                "the setup service's workers", timeout)
    await pilot.pause()


async def type_into(pilot, screen: NewRunScreen, key: str, text: str) -> None:
    """Focus a hyperparameter field, clear it and type `text`, key by key."""
    row = await screen.form.reveal(key)
    await pilot.pause()
    row.control.focus()
    await pilot.press("end", "ctrl+u", *text)


def test_fixed_sources_give_fixed_figures(tmp_path):
    sources = FixedSources(tmp_path, budget=3 * GIB, lengths=[7])
    assert sources.advisor().budget.budget_bytes == 3 * GIB
    assert sources.token_lengths("m", "d", {}, False) == [7]
    assert sources.machine().trainers[0].pid == 4242

"""MachineDialog: this machine's memory, budget, swap, load and GPU, and what training uses.

A panel over whatever screen is open (`m` from anywhere, esc closes). Every two seconds a
worker thread reads: total and available memory, the MLX budget training may use (and where
it comes from), swap in use, the CPU load, and on macOS the memory pressure
(`memory_pressure`) and GPU use (`macmon pipe`, when installed; no sudo). Each figure that
cannot be read here says so instead. Below: the resident memory of each active run's trainer, and the peaks its last train event
reported (MLX's, and the process's resident footprint's).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from zyquo_tui.core.formatting import DASH, fmt_bytes, progress_bar
from zyquo_tui.core.runs.run import Run
from zyquo_tui.dashboard.dialogs.dialog import Dialog
from zyquo_tui.dashboard.setup_sources import MachineReading, setup_sources

REFRESH_SECONDS = 2.0
BAR_WIDTH = 20


def _bar(share: float, style: str) -> Text:
    filled, empty = progress_bar(min(max(share, 0.0), 1.0), BAR_WIDTH)
    text = Text()
    text.append(filled, style=style)
    text.append(empty, style="dim")
    return text


def machine_table(reading: MachineReading) -> Table:
    """The panel's figures as a two-column grid (label, figure)."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    total, available = reading.total_bytes, reading.available_bytes
    used = max(total - available, 0)
    share = used / total if total else 0.0
    memory = _bar(share, "red" if share > 0.9 else "yellow" if share > 0.75 else "green")
    memory.append(f" {fmt_bytes(used)} used of {fmt_bytes(total)}\n")
    memory.append(f"{fmt_bytes(available)} available", style="bold")
    table.add_row("Memory", memory)
    budget = reading.budget
    if budget is not None:
        line = Text()
        line.append(fmt_bytes(budget.budget_bytes), style="bold")
        line.append(f" training may use ({budget.budget_source}, {budget.device})")
        if not budget.probed:
            line.append("; the MLX probe failed", style="yellow")
        table.add_row("MLX budget", line)
    else:
        table.add_row("MLX budget", Text("not readable: the MLX probe failed", style="yellow"))
    swap = Text()
    swap.append(fmt_bytes(reading.swap_used_bytes), style="bold red"
                if reading.swap_used_bytes > (1 << 30) else "bold")
    swap.append(" in use" + (f" of {fmt_bytes(reading.swap_total_bytes)}"
                             if reading.swap_total_bytes else ""))
    table.add_row("Swap", swap)
    if reading.cpu_load is not None:
        cores = f" on {reading.cpu_count} cores" if reading.cpu_count else ""
        table.add_row("CPU load", f"{reading.cpu_load:.2f} (1 minute){cores}")
    else:
        table.add_row("CPU load", DASH)
    if reading.free_percent is not None:
        pressure = Text()
        pressure.append(f"{reading.free_percent}% free", style="bold")
        pressure.append(" (memory_pressure)")
        table.add_row("Pressure", pressure)
    elif reading.platform == "macOS":
        table.add_row("Pressure", Text("not readable (memory_pressure failed)", style="dim"))
    else:
        table.add_row("Pressure", Text("macOS only", style="dim"))
    if reading.gpu is not None:
        gpu = _bar(reading.gpu.gpu_percent / 100, "cyan")
        gpu.append(f" {reading.gpu.gpu_percent:.0f}% busy")
        if reading.gpu.gpu_mhz:
            gpu.append(f" at {reading.gpu.gpu_mhz} MHz")
        if reading.gpu.gpu_watts is not None:
            gpu.append(f", {reading.gpu.gpu_watts:.1f} W")
        table.add_row("GPU", gpu)
    else:
        table.add_row("GPU", Text(reading.gpu_note or DASH, style="dim"))
    if reading.trainers:
        lines = Text()
        for index, use in enumerate(reading.trainers):
            if index:
                lines.append("\n")
            lines.append(fmt_bytes(use.rss_bytes), style="bold")
            lines.append(f" resident: {use.run_name} (pid {use.pid})")
            if use.peak_memory_bytes is not None or use.peak_rss_bytes is not None:
                peaks = [f"{fmt_bytes(value)} {what}" for value, what in (
                    (use.peak_memory_bytes, "MLX"), (use.peak_rss_bytes, "resident"))
                    if value is not None]
                lines.append(f"\npeak so far: {', '.join(peaks)}", style="dim")
        table.add_row("Trainer", lines)
    else:
        table.add_row("Trainer", Text("no run is training now", style="dim"))
    return table


class MachineDialog(Dialog[None]):
    """The machine panel (see the module docstring); `active_runs` says which runs' trainers
    to look at, read again at every refresh."""

    AREA = "Machine"
    BINDINGS = [Binding("escape,m,q", "close", "Close", id="machine.close",
                        tooltip="Close the machine panel")]
    DEFAULT_CSS = """
    MachineDialog > .dialog-frame {
        width: 78;
        max-width: 100%;
        max-height: 100%;
        padding: 0 1;
    }
    MachineDialog .dialog-heading { margin-bottom: 0; }
    """
    SCROLLS = True

    def __init__(self, active_runs: Callable[[], list[Run]],
                 refresh_seconds: float = REFRESH_SECONDS) -> None:
        super().__init__("Machine")
        self.active_runs = active_runs
        self.refresh_seconds = refresh_seconds
        self.reading: MachineReading | None = None
        self._reading = False

    def compose_content(self) -> ComposeResult:
        yield Static("reading…", id="machine-figures", markup=False)
        yield Static("", id="machine-keys", markup=False)

    def on_mount(self) -> None:
        self.read()
        if self.refresh_seconds:
            self.set_interval(self.refresh_seconds, self.read, name="machine refresh")

    def read(self) -> None:
        if self._reading:
            return
        self._reading = True
        active = self.active_runs()
        sources = setup_sources(self.app)

        def read() -> None:
            try:
                reading = sources.machine(active)
            except Exception as error:  # every figure fails soft; this is the last guard
                self.app.call_from_thread(self._failed, str(error))
                return
            self.app.call_from_thread(self._show, reading)
        self.run_worker(read, thread=True, group="machine", exit_on_error=False,
                        name="read the machine")

    def _failed(self, error: str) -> None:
        self._reading = False
        if self.is_attached:
            self.query_one("#machine-figures", Static).update(f"Cannot read the machine: {error}")

    def _show(self, reading: MachineReading) -> None:
        self._reading = False
        if not self.is_attached:
            return
        self.reading = reading
        title = Text()
        title.append(f"This machine · {reading.platform}", style="bold")
        if reading.cpu_count:
            title.append(f" · {reading.cpu_count} cores", style="bold")
        self.query_one(".dialog-heading", Static).update(title)
        self.query_one("#machine-figures", Static).update(machine_table(reading))
        every = f"every {self.refresh_seconds:g} s" if self.refresh_seconds else "on open"
        self.query_one("#machine-keys", Static).update(
            Text(f"Read {every} · esc closes", style="dim"))

"""Export jobs started from the dashboard: the start, and a notification when each ends.

The job itself is a detached process (core/processes/exports.py) that outlives the dashboard;
the App's worker here only watches its record, so leaving the checkpoints screen (or the
dashboard) changes nothing for the job.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from zyquo_tui.core.processes import exports

if TYPE_CHECKING:
    from zyquo_tui.dashboard.app import ZyquoApp
    from zyquo_tui.dashboard.dialogs.export import ExportChoice

POLL_SECONDS = 0.5
# The next step when the folder is taken (the CLI's says -o, which the dashboard has not).
EXISTS_HINT = "press e again and give another folder, or move it away"


def start_export(app: ZyquoApp, run_id: str, step: int, choice: ExportChoice) -> None:
    """Start the job in a worker thread (a refusal becomes a notification), then watch it."""
    home = app.store.home

    def start() -> exports.ExportJob:
        return exports.start_export(app.store, run_id, step=step, output=choice.output,
                                    quantize=choice.quantize, gguf=choice.gguf,
                                    exists_hint=EXISTS_HINT)

    def started(job: exports.ExportJob) -> None:
        app.notify(f"Exporting step {job.step} of {job.run_name} to {job.output} "
                   f"({job.weights}); you will hear when it ends.", title="Export")
        app.run_worker(lambda: _watch(app, home, job.id), thread=True, group="exports",
                       name=f"export {job.id}", exit_on_error=False)
    app.service.act("Export", start, started)


def _watch(app: ZyquoApp, home: Path, job_id: str) -> None:
    while True:
        job = exports.refresh(home, exports.load_job(home, job_id))
        if job.state in exports.ENDED:
            break
        time.sleep(POLL_SECONDS)
    if job.state == exports.COMPLETED:
        where = f" (listed in the models as {Path(job.listed_as).name})" if job.listed_as else ""
        app.call_from_thread(app.notify, f"{job.message}{where}", title="Export done",
                             timeout=15)
    else:
        app.call_from_thread(app.notify, job.message or f"The export {job.state}.",
                             title=f"Export {job.state}", severity="error", timeout=30)


def latest_export_line(home: Path, run_id: str) -> str | None:
    """The run's newest export in a few words, for the checkpoints screen."""
    jobs = exports.list_jobs(home, run_id)
    if not jobs:
        return None
    job = jobs[-1]
    state = job.phase if job.state == exports.RUNNING else job.state
    return f"step {job.step} → {job.output} ({job.weights}): {state}"

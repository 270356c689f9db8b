"""Export jobs: a run's adapter fused into its model, as a background job that outlives its caller.

`start_export` checks the request, writes the job's record ($ZYQUO_HOME/exports/ID.json) and
starts the exporter (`trainer/export.py`, entry point EXPORTER), which detaches as the runner
does (it forks, its parent exits), so closing the dashboard or the SSH session leaves it
working. The exporter keeps the record current (phase, then the check and the end); any
reader can tell a job whose process died (`refresh`). The weights and the check are described
in docs/CLI.md (`runs export`).

States: running -> completed | rejected (the check found the fused model differs from base +
adapter) | failed (an error, or the process died).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.runs.run import new_run_id
from zyquo_tui.core.store.atomic import file_lock, write_json_atomic
from zyquo_tui.core.store.checkpoints import checkpoint_at
from zyquo_tui.core.store.paths import ensure_dir, models_dir
from zyquo_tui.core.store.store import RunStore
from zyquo_tui.core.system.entry_points import EXPORTER, python_command
from zyquo_tui.core.system.liveness import is_alive
from zyquo_tui.core.system.machine import unwritable_reason

EXPORTS_DIR = "exports"
RUNNING, COMPLETED, REJECTED, FAILED = "running", "completed", "rejected", "failed"
ENDED = (COMPLETED, REJECTED, FAILED)
# The model types mlx-lm's fuse converts to GGUF (mlx_lm/fuse.py; a test compares), in fp16.
GGUF_MODEL_TYPES = ("llama", "mixtral", "mistral")
QUANTIZE_BITS = (4, 8)
# How many validation rows the check evaluates (the first ones: the same rows every time).
CHECK_ROWS = 8
# A record written, its process not yet recorded: given this long before it counts as dead.
STARTING_GRACE_SECONDS = 30.0

# The check's tolerances on the mean validation loss (docs/CLI.md). Fusing float weights
# changes only rounding (1e-7 on the sample model). Quantizing the fused weights costs some
# of what the adapter learnt (the 4-bit sample keeps about 94% of its gain, 8-bit 99.9%); the
# export passes while it keeps at least three quarters. A fuse that lost the adapter (mlx-lm
# issue 1172) has the base's loss and keeps none of it.
FLOAT_TOLERANCE = 1e-3
QUANTIZED_SHARE_OF_GAIN = 0.25


def tolerance(base_loss: float, adapter_loss: float, quantized: bool) -> float:
    """How far the fused model's loss may be from base + adapter's."""
    if not quantized:
        return FLOAT_TOLERANCE
    return FLOAT_TOLERANCE + QUANTIZED_SHARE_OF_GAIN * abs(base_loss - adapter_loss)


@dataclass
class ExportJob:
    """One export: what was asked, where it stands, and the check's figures."""

    id: str
    run_id: str
    run_name: str
    step: int
    model: str
    adapters: str
    data: str
    output: str
    dequantize: bool  # the base is quantized and the export is float
    quantize: int | None  # bits of the written weights, when quantized
    gguf: bool
    state: str = RUNNING
    phase: str = "starting"
    created: float = field(default_factory=time.time)
    ended: float | None = None
    process: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] | None = None
    message: str | None = None
    listed_as: str | None = None  # the link that lists the model, when -o is elsewhere

    @property
    def weights(self) -> str:
        """The written weights, in words ("float", "4-bit")."""
        return f"{self.quantize}-bit" if self.quantize else "float"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "weights": self.weights}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExportJob:
        known = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in data.items() if key in known})


def exports_dir(home: Path) -> Path:
    return home / EXPORTS_DIR


def job_path(home: Path, job_id: str) -> Path:
    return exports_dir(home) / f"{job_id}.json"


def log_path(home: Path, job_id: str) -> Path:
    return exports_dir(home) / f"{job_id}.log"


def save_job(home: Path, job: ExportJob) -> None:
    write_json_atomic(job_path(home, job.id), job.to_json())


def load_job(home: Path, job_id: str) -> ExportJob:
    try:
        data = json.loads(job_path(home, job_id).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"No export job {job_id} in {exports_dir(home)}.") from None
    return ExportJob.from_json(data)


def refresh(home: Path, job: ExportJob) -> ExportJob:
    """The job, marked failed when its process is gone without having recorded its end."""
    if job.state != RUNNING:
        return job
    process = job.process
    if process.get("pid"):
        if is_alive(process["pid"], process.get("start_time"), process.get("host"),
                    process.get("boot_time")):
            return job
    elif time.time() - job.created < STARTING_GRACE_SECONDS:
        return job
    latest = load_job(home, job.id)  # it may have ended between our read and now
    if latest.state != RUNNING:
        return latest
    latest.state, latest.ended = FAILED, time.time()
    latest.message = (f"The export stopped without finishing (its process ended); see "
                      f"{log_path(home, job.id)}.")
    save_job(home, latest)
    return latest


def list_jobs(home: Path, run_id: str | None = None) -> list[ExportJob]:
    """Every export job (of `run_id`), oldest first, each refreshed."""
    jobs = []
    for path in sorted(exports_dir(home).glob("*.json")):
        try:
            job = ExportJob.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue  # being written, or damaged: not a job to show
        if run_id is None or job.run_id == run_id:
            jobs.append(refresh(home, job))
    return jobs


def wait(home: Path, job_id: str, poll: float = 0.25, on_change=None) -> ExportJob:
    """Block until the job ends; `on_change(job)` hears each new phase."""
    seen = None
    while True:
        job = refresh(home, load_job(home, job_id))
        if on_change is not None and job.phase != seen:
            seen = job.phase
            on_change(job)
        if job.state in ENDED:
            return job
        time.sleep(poll)


# -- starting -------------------------------------------------------------------------------------

def default_output(home: Path, run_name: str, step: int, weights: str) -> Path:
    """$ZYQUO_HOME/models/NAME-stepN[-4bit]: in the models list with no link needed."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", run_name).strip("-.") or "run"
    suffix = "" if weights == "float" else f"-{weights.replace('-', '')}"
    return models_dir(home) / f"{slug}-step{step}{suffix}"


def check_rows_file(data: Path) -> Path | None:
    """The file the check reads its rows from: valid.jsonl, else test.jsonl, else train.jsonl."""
    for name in ("valid.jsonl", "test.jsonl", "train.jsonl"):
        if (data / name).is_file() and (data / name).stat().st_size:
            return data / name
    return None


def _model_config(model: str) -> dict[str, Any]:
    try:
        return json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"The model folder {model} has no readable config.json; put the run's "
                        "model back to export it.") from None


def start_export(store: RunStore, run_id: str, *, step: int | None = None,
                 output: Path | None = None, dequantize: bool = False,
                 quantize: int | None = None, gguf: bool = False,
                 exists_hint: str = "give another -o folder, or move it away") -> ExportJob:
    """Check the request (UserError, exit 2, nothing started) and start the job.
    `exists_hint` ends the refusal of an output folder that is taken: what to do instead, in
    the caller's own terms (the CLI's -o; the dashboard's export dialog)."""
    run = store.get(run_id)
    checkpoint = checkpoint_at(store.adapters_dir(run.id), step, run.id)
    if quantize is not None and quantize not in QUANTIZE_BITS:
        raise UserError(f"--quantize is {quantize}; give 4 or 8.")
    if dequantize and quantize:
        raise UserError("--dequantize writes float weights and --quantize quantized ones; "
                        "give one of them.")
    config = _model_config(run.model)
    if gguf:
        model_type = config.get("model_type")
        if model_type not in GGUF_MODEL_TYPES:
            raise UserError(f"GGUF export is not supported for {model_type!r} models: mlx-lm "
                            f"converts only {', '.join(GGUF_MODEL_TYPES)}; drop --gguf.")
        if quantize:
            raise UserError("GGUF export writes fp16 weights only, so it cannot be combined "
                            "with --quantize; drop one of them.")
    if not Path(run.data).is_dir() or check_rows_file(Path(run.data)) is None:
        raise UserError(f"The export's check needs the run's data ({run.data}: valid.jsonl, "
                        "test.jsonl or train.jsonl) and it is gone; put it back to export.")
    quantized_base = "quantization" in config or "quantization_config" in config
    job = ExportJob(
        id=new_run_id(), run_id=run.id, run_name=run.name, step=checkpoint.step,
        model=run.model, adapters=str(store.adapters_dir(run.id)), data=run.data, output="",
        dequantize=quantized_base and not quantize, quantize=quantize, gguf=gguf)
    target = (output or default_output(store.home, run.name, checkpoint.step, job.weights))
    target = target.expanduser().absolute()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError(f"{target} already exists; {exists_hint}.")
    what = "the exported model" if output is None else f"the exported model (-o {output})"
    remedy = None if output is None else "give -o a folder you can write"
    ensure_dir(target.parent, what, remedy=remedy)
    # A folder that exists may still take no files (/proc, a read-only mount; permission
    # bits say nothing to root): found now, not by the job after minutes of fusing.
    unwritable = unwritable_reason(target.parent)
    if unwritable:
        raise UserError(f"Cannot write {what} to {target}: {unwritable}; "
                        f"{remedy or 'set $ZYQUO_HOME to a folder you can write'}.")
    job.output = str(target)
    ensure_dir(exports_dir(store.home), "export jobs")
    # Under a lock, so two exports started together cannot both take one folder: the second
    # would only fail at its end, after minutes of fusing.
    with file_lock(exports_dir(store.home) / "start.lock"):
        taken = next((other for other in list_jobs(store.home)
                      if other.state == RUNNING and other.output == job.output), None)
        if taken is not None:
            raise UserError(f"Export {taken.id} (run {taken.run_id}) is writing {target} "
                            f"now; wait for it (`zyquo-tui runs exports`), or {exists_hint}.")
        save_job(store.home, job)
    _spawn(store.home, job)
    return job


def _spawn(home: Path, job: ExportJob) -> None:
    argv = python_command(EXPORTER, str(job_path(home, job.id)))
    with open(log_path(home, job.id), "ab") as log:
        launcher = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    launcher.wait(timeout=30)  # it forks and exits at once; the exporter goes on alone

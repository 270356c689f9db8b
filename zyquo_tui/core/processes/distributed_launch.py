"""How the runner starts a distributed run: mlx.launch, one trainer per rank.

- The launcher ignores SIGTERM, SIGINT and SIGHUP (so do the ssh clients it starts, which keep
  an ignored signal ignored): a cancel, sent to the whole process group, reaches the local
  ranks, which agree at their next step to stop together (trainer/distributed.py), and never
  cuts the launcher or a remote rank's SSH link in the middle of that.
- Every other host needs the run's folder at the same path: run.json, and for a resume the
  checkpoint it continues from. They are copied there over SSH before the launch.
- A rank that dies: the others fail at their next collective and exit; mlx.launch names the
  rank in trainer.log (`classify_exit` reads it). Should rank 0 be gone while the launcher
  lingers, the runner kills the group after RANK_GRACE_SECONDS.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
from pathlib import Path

from zyquo_tui.core.runs.hosts import Distribution, HostfileError, distribution_of
from zyquo_tui.core.runs.run import Run
from zyquo_tui.core.store.checkpoints import adapter_file, state_files
from zyquo_tui.core.store.store import RUN_FILE, RunStore
from zyquo_tui.core.system.cluster import (  # noqa: F401 (the runner's names)
    LAUNCHER_MARKER,
    LaunchError,
    launch_command,
    remote_hosts,
)
from zyquo_tui.core.system.liveness import is_alive

RANK_GRACE_SECONDS = 10.0
SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]


def distribution_for(run: Run) -> Distribution | None:
    try:
        return distribution_of(run.hyperparameters.zyquo_tui)
    except HostfileError as error:
        raise LaunchError(str(error)) from None


def ignore_stop_signals() -> None:
    """preexec_fn of the launcher (see the module docstring)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)


def distributed_command(store: RunStore, run: Run, distribution: Distribution,
                        trainer: list[str]) -> list[str]:
    """The launcher's argv, after the run's folder is on every other host."""
    run_dir = store.run_dir(run.id)
    argv = launch_command(distribution, run_dir, trainer)
    for host in remote_hosts(distribution):
        copy_run_folder(store, run, host)
    return argv


def copy_run_folder(store: RunStore, run: Run, host: str) -> None:
    """run.json, and the checkpoint a resume starts from, to the same paths on `host`."""
    run_dir = store.run_dir(run.id)
    adapters = store.adapters_dir(run.id)
    files = [run_dir / RUN_FILE]
    if run.resume_from_step is not None:
        files += [adapter_file(adapters, run.resume_from_step),
                  *state_files(adapters, run.resume_from_step)]
    _ssh(host, f"mkdir -p {shlex.quote(str(adapters))}")
    for path in files:
        done = subprocess.run(["scp", "-q", "-p", *SSH_OPTIONS, str(path),
                               f"{host}:{shlex.quote(str(path))}"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=600)
        if done.returncode != 0:
            raise LaunchError(f"Copying {path.name} to {host} failed "
                              f"({(done.stderr or '').strip() or done.returncode}); run "
                              "`zyquo-tui hosts check` for what to fix.")


def _ssh(host: str, command: str) -> None:
    done = subprocess.run(["ssh", *SSH_OPTIONS, host, command], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    if done.returncode != 0:
        raise LaunchError(f"{host} did not answer over SSH ({(done.stderr or '').strip()}); "
                          "run `zyquo-tui hosts check` for what to fix.")


def world_size_refusal(store: RunStore, run: Run, step: int) -> str | None:
    """Why `run` cannot resume exactly from `step` with its number of processes (the batch
    order and the pending gradients of a checkpoint belong to the world size that saved it)."""
    import json

    from zyquo_tui.core.runs.hosts import world_size_of

    try:
        meta = json.loads(state_files(store.adapters_dir(run.id), step)[1].read_text("utf-8"))
    except (OSError, ValueError):
        return None  # the trainer says what is wrong with the checkpoint
    saved, now = int(meta.get("world_size", 1)), world_size_of(run.hyperparameters.zyquo_tui)
    if saved == now:
        return None
    return (f"Run {run.id}'s step {step} was saved by {saved} process"
            f"{'es' if saved > 1 else ''} and the run has {now} now, so it cannot resume "
            "exactly; give it the hosts it had, or fork a new run from that step.")


def rank_zero_gone(process: dict | None) -> bool:
    """Rank 0, as the trainer recorded it in run.json, has ended."""
    ranks = (process or {}).get("ranks") or []
    if not ranks:
        return False
    first = ranks[0]
    return not is_alive(first.get("pid"), first.get("start_time"), first.get("host"))


def trainer_log_note(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")

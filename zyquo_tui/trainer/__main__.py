"""`python -m zyquo_tui.trainer RUN_DIR`: train one run, writing events and checkpoints.

Exit status: 0 completed or cancelled, 1 failed (the `failed` event says why), 2 bad usage.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from zyquo_tui.core.errors import EXIT_USAGE
from zyquo_tui.core.system.entry_points import TRAINER, usage


class StopRequest:
    """SIGTERM/SIGINT: the first asks for a checkpoint and a clean exit; the second is final."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True
        # The next signal takes the default action, which the kernel carries out at once, even
        # in the middle of a long MLX computation (a Python handler would wait for it to end).
        # The runner then records the run as cancelled without a final checkpoint.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: {usage(TRAINER)} RUN_DIR", file=sys.stderr)
        return EXIT_USAGE
    run_dir = Path(args[0]).resolve()
    if not (run_dir / "run.json").is_file():
        print(f"zyquo-tui trainer: {run_dir} is not a run folder (it has no run.json).",
              file=sys.stderr)
        return EXIT_USAGE
    stop = StopRequest()
    stop.install()  # before the slow imports, so an early cancel is not lost
    from zyquo_tui.trainer.distributed import rank_from_environment
    from zyquo_tui.trainer.follower_session import FollowerSession
    from zyquo_tui.trainer.session import TrainingSession

    # Under mlx.launch, rank 0 writes the run's files and the other ranks write none.
    session = TrainingSession if rank_from_environment() == 0 else FollowerSession
    return session(run_dir, stop).run()


if __name__ == "__main__":
    sys.exit(main())

"""The setup screens' parts: form values to hyperparameters and back, problems at their
fields, the breakdown bar, and that setting up a run never imports mlx."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


SESSION = r"""
import asyncio, sys
from zyquo_tui.dashboard.app import ZyquoApp
from zyquo_tui.dashboard.notify import NotificationSettings
from zyquo_tui.dashboard.screens.new_run_screen import NewRunScreen

async def main():
    app = ZyquoApp(notifications=NotificationSettings(desktop="off", bell=False))
    async with app.run_test(size=(100, 30)) as pilot:
        for keys in (["n"], ["escape", "M"], ["escape", "D"], ["escape", "m"], ["escape"]):
            await pilot.press(*keys)
            await pilot.pause(0.5)
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("mlx", "mlx_lm")))

asyncio.run(main())
"""


def test_setting_up_a_run_never_imports_mlx(isolated_home):
    done = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"

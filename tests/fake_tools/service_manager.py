#!/usr/bin/env python3
"""A stand-in for systemctl and launchctl (this file under both names, first on every test's
PATH: tests/conftest.py), so no test reaches the user's real service manager.

It records each call (its name and arguments, one JSON line) in $ZYQUO_FAKE_SERVICE_LOG,
keeps whether the unit is enabled (systemctl) or loaded (launchctl) in a file beside that log,
and answers `systemctl show` and `launchctl print` with the outputs recorded from the real
tools in tests/data/. With ZYQUO_FAKE_SERVICE_MANAGER=unreachable it answers as systemctl does
where there is no user service manager (a container, an SSH session without lingering).
"""

import json
import os
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"


def main() -> int:
    tool, args = Path(sys.argv[0]).name, sys.argv[1:]
    log = os.environ.get("ZYQUO_FAKE_SERVICE_LOG")
    state = Path(log + ".state") if log else None
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps([tool, *args]) + "\n")
    on = state is not None and state.exists()
    if tool == "systemctl":
        if os.environ.get("ZYQUO_FAKE_SERVICE_MANAGER") == "unreachable":
            print("Failed to connect to bus: No medium found", file=sys.stderr)
            return 1
        verb = next((a for a in args if not a.startswith("-")), "")
        if verb == "show":
            name = "enabled" if on else "missing"
            sys.stdout.write((DATA / "linux" / f"systemctl_show_{name}.txt").read_text())
        elif verb in ("enable", "disable") and state is not None:
            state.touch() if verb == "enable" else state.unlink(missing_ok=True)
        return 0
    if tool == "launchctl":
        verb = args[0] if args else ""
        if verb == "print":
            name = "loaded" if on else "missing"
            sys.stdout.write((DATA / "macos" / f"launchctl_print_{name}.txt").read_text())
            return 0 if on else 113
        if verb in ("bootstrap", "bootout") and state is not None:
            state.touch() if verb == "bootstrap" else state.unlink(missing_ok=True)
        return 0
    print(f"{tool}: not a service manager this stand-in knows", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

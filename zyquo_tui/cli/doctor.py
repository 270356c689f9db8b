"""`zyquo-tui doctor`: is this machine ready to fine-tune? Versions, device, memory, store."""

from __future__ import annotations

import platform
import sys

from zyquo_tui import __version__
from zyquo_tui.cli.output import fmt_bytes, print_json
from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.paths import settings_file, zyquo_home
from zyquo_tui.core.system import machine


def register(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="check Python, MLX, memory and the store")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def _version(package: str) -> str | None:
    import importlib.metadata  # 60 ms: only for this command

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _config_problem(home) -> str | None:
    """Why config.toml cannot be used (the sentence `models`, `plan` and the rest refuse
    with), or None: doctor reports it where they would stop."""
    from zyquo_tui.core.store.user_settings import Settings

    try:
        Settings.load(home)
    except UserError as error:
        return error.message
    return None


def collect() -> dict:
    home = zyquo_home()
    memory = machine.memory_facts()
    probe = machine.probe_mlx()
    problem = machine.unwritable_reason(home)
    return {
        "zyquo_tui": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "mlx": _version("mlx"),
        "mlx_lm": _version("mlx-lm"),
        "device": probe["device"] if probe else None,
        "device_info": probe["device_info"] if probe else None,
        "mlx_memory_limit_bytes": probe["memory_limit_bytes"] if probe else None,
        "mlx_works": probe is not None,
        "memory": {
            "total_bytes": memory.total_bytes,
            "available_bytes": memory.available_bytes,
            "swap_used_bytes": memory.swap_used_bytes,
            "wired_limit_bytes": memory.wired_limit_bytes,
        },
        "store": {"path": str(home), "exists": home.is_dir(), "writable": problem is None,
                  "problem": problem},
        "config": {"path": str(settings_file(home)), "exists": settings_file(home).is_file(),
                   "problem": _config_problem(home)},
    }


def run(args) -> int:
    facts = collect()
    if args.json:
        print_json(facts)
    else:
        mem = facts["memory"]
        store = facts["store"]
        print(f"zyquo-tui  {facts['zyquo_tui']}")
        print(f"python     {facts['python']} ({sys.executable})")
        print(f"mlx        {facts['mlx'] or 'not installed'}")
        print(f"mlx-lm     {facts['mlx_lm'] or 'not installed'}")
        print(f"device     {facts['device'] or 'unknown: MLX did not start (see above)'}")
        print(f"memory     {fmt_bytes(mem['total_bytes'])} total, "
              f"{fmt_bytes(mem['available_bytes'])} available, "
              f"{fmt_bytes(mem['swap_used_bytes'])} swap in use")
        if facts["mlx_memory_limit_bytes"]:
            print(f"mlx limit  {fmt_bytes(facts['mlx_memory_limit_bytes'])}")
        if store["writable"]:
            state = "writable" + ("" if store["exists"] else ", not created yet")
        else:
            state = f"NOT usable: {store['problem']}; set ZYQUO_HOME to a folder you can write"
        print(f"store      {store['path']} ({state})")
        config = facts["config"]
        if config["problem"]:
            print(f"config     NOT usable: {config['problem']}")
        else:
            state = "read" if config["exists"] else "none: the defaults"
            print(f"config     {config['path']} ({state})")
    ok = facts["mlx_works"] and facts["store"]["writable"] and not facts["config"]["problem"]
    return 0 if ok else 1

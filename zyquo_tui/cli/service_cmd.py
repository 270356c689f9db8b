"""`zyquo-tui service install|uninstall|status`: run `runs recover` at boot, and with `--serve`
keep `zyquo-tui serve` up (docs/CLI.md).

Exit status: 0 done (status: installed and loaded, or its manager cannot be asked), 1 the file
was written or removed but the service manager refused (its words are printed), or status found
it missing or not loaded; 2 bad input (nothing changed).
"""

from __future__ import annotations

import os
import sys

from zyquo_tui.cli.output import print_json
from zyquo_tui.cli.web_cmd import port_number
from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE, UserError
from zyquo_tui.core.processes.service import (
    LAUNCHD_DAEMON,
    ServicePlan,
    run_commands,
    service_plan,
    service_status,
)
from zyquo_tui.core.store.atomic import write_atomic
from zyquo_tui.core.store.paths import zyquo_home


def register(subparsers) -> None:
    service = subparsers.add_parser(
        "service", help="resume interrupted runs and the queue at boot, or (--serve) keep "
                        "the Tinker server up (launchd or systemd)")
    sub = service.add_subparsers(dest="service_command", metavar="ACTION",
                                 parser_class=type(service))
    for name, handler, helptext in (
        ("install", cmd_install, ("write the launchd agent (macOS) or systemd user unit "
                                  "(Linux) and load it")),
        ("uninstall", cmd_uninstall, "unload the service and remove its file"),
        ("status", cmd_status, "whether the service is installed and loaded"),
    ):
        p = sub.add_parser(name, help=helptext)
        if name != "status":
            p.add_argument("--dry-run", action="store_true",
                           help="print the file and the commands; change nothing")
        p.add_argument("--daemon", action="store_true",
                       help="macOS: a LaunchDaemon, which starts at boot without a login "
                            "(needs sudo)")
        p.add_argument("--serve", action="store_true",
                       help="the server's service instead: keeps `zyquo-tui serve` up "
                            "(started again whenever it ends)")
        if name == "install":
            p.add_argument("--host", help="with --serve: the address the server listens on "
                                          "(default: 127.0.0.1, this machine only)")
            p.add_argument("--port", type=port_number,
                           help="with --serve: its TCP port (default: 8765)")
        p.add_argument("--json", action="store_true")
        p.set_defaults(handler=handler)


def _served_address(args) -> tuple[str, int] | None:
    """(host, port) of the server's service, None for the boot recovery's."""
    from zyquo_tui.cli.serve_cmd import DEFAULT_PORT, NEEDED
    from zyquo_tui.cli.web_cmd import DEFAULT_HOST

    host, port = getattr(args, "host", None), getattr(args, "port", None)
    if not args.serve:
        if host is not None or port is not None:
            raise UserError("--host and --port are the server's: give them with --serve "
                            "(`zyquo-tui service install --serve --port 9000`).", EXIT_USAGE)
        return None
    if args.service_command == "install":
        import importlib.util

        missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
        if missing:  # the service would start it again and again, failing each time
            raise UserError(f"The server needs {', '.join(missing)}, not installed here: run "
                            f"{sys.executable} -m pip install 'zyquo-tui[serve]', then "
                            "install its service.", EXIT_USAGE)
    return (host or DEFAULT_HOST, port or DEFAULT_PORT)


def _plan(args) -> ServicePlan:
    if args.daemon and sys.platform != "darwin":
        raise UserError("--daemon is macOS's LaunchDaemon; on Linux the user unit starts at "
                        "boot once `loginctl enable-linger $USER` is set.", EXIT_USAGE)
    plan = service_plan(daemon=args.daemon, store_home=zyquo_home().expanduser().resolve(),
                        serve=_served_address(args))
    if plan.kind == LAUNCHD_DAEMON and not getattr(args, "dry_run", False) \
            and os.geteuid() != 0 and args.service_command != "status":
        serve = " --serve" if args.serve else ""
        raise UserError(f"The LaunchDaemon goes in {plan.path.parent}, which needs root: run "
                        f"`sudo {' '.join(sys.argv[:1] or ['zyquo-tui'])} service "
                        f"{args.service_command}{serve} --daemon`.", EXIT_USAGE)
    return plan


def _print_dry_run(plan: ServicePlan, commands: list[list[str]], writes: bool) -> None:
    if writes:
        print(f"would write {plan.path}:")
        print(plan.content.rstrip("\n"))
    else:
        print(f"would remove {plan.path}")
    for argv in commands:
        print(f"would run: {' '.join(argv)}")
    for note in plan.notes:
        print(f"note: {note}")


def _report(plan: ServicePlan, results: list[dict], done: str, as_json: bool,
            extra: dict) -> int:
    failed = [r for r in results if not r["ok"]]
    if as_json:
        print_json({**plan.to_json(), **extra, "commands": results})
    else:
        print(done)
        for result in failed:
            why = "not found" if result["missing"] else result["output"] or "failed"
            print(f"warning: `{' '.join(result['command'])}`: {why}", file=sys.stderr)
        for note in plan.notes:
            print(f"note: {note}")
    return EXIT_PROBLEMS if failed else 0


def cmd_install(args) -> int:
    plan = _plan(args)
    if args.dry_run:
        if args.json:
            print_json({**plan.to_json(), "dry_run": True})
        else:
            _print_dry_run(plan, plan.install_commands, writes=True)
        return 0
    try:
        plan.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(plan.path, plan.content)
    except OSError as error:
        raise UserError(f"Cannot write {plan.path}: {error.strerror}; nothing was "
                        "installed.", EXIT_USAGE) from None
    results = run_commands(plan.install_commands)
    return _report(plan, results, f"installed {plan.path}", args.json,
                   {"dry_run": False})


def cmd_uninstall(args) -> int:
    plan = _plan(args)
    if args.dry_run:
        if args.json:
            print_json({**plan.to_json(), "dry_run": True})
        else:
            _print_dry_run(plan, plan.uninstall_commands, writes=False)
        return 0
    if not plan.path.exists():
        if args.json:
            print_json({**plan.to_json(), "dry_run": False, "removed": False, "commands": []})
        else:
            print(f"not installed ({plan.path} does not exist)")
        return 0
    # Unloading something not loaded fails harmlessly: only the file's removal must work.
    results = run_commands(plan.uninstall_commands)
    plan.path.unlink()
    if args.json:
        print_json({**plan.to_json(), "dry_run": False, "removed": True, "commands": results})
    else:
        print(f"removed {plan.path}")
    return 0


def cmd_status(args) -> int:
    plan = _plan(args)
    status = service_status(plan)
    if args.json:
        print_json(status)
    else:
        print(f"service   {plan.kind}")
        print(f"file      {plan.path} ({'installed' if status['installed'] else 'not installed'})")
        loaded = status["loaded"]
        print("loaded    " + ("unknown (its service manager cannot be asked here)"
                              if loaded is None else "yes" if loaded else "no"))
        for key, value in (status.get("details") or {}).items():
            print(f"{key.replace('_', ' '):<9} {value}")
    return 0 if status["installed"] and status["loaded"] is not False else EXIT_PROBLEMS

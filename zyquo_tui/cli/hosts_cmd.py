"""`zyquo-tui hosts check`: is every host of a distributed run ready to train it?

One line per host: ready with its versions and free memory, or not ready with what to do.
Exit status: 0 every host ready, 1 one is not, 2 bad input.
"""

from __future__ import annotations

from pathlib import Path

from zyquo_tui.cli.output import fmt_bytes, print_json
from zyquo_tui.core.errors import EXIT_OK, EXIT_PROBLEMS, UserError


def register(subparsers) -> None:
    hosts = subparsers.add_parser("hosts", help="the Macs of a distributed run (mlx.launch)")
    sub = hosts.add_subparsers(dest="hosts_command", metavar="ACTION", parser_class=type(hosts))
    p = sub.add_parser(
        "check", help="each host reachable by SSH without a password, with the same Python, "
                      "zyquo-tui, mlx and mlx-lm, the model and data at the same paths")
    p.add_argument("--hosts", help="comma-separated host names or addresses (default: this "
                                   "machine)")
    p.add_argument("--hostfile", type=Path, help="an mlx.launch hostfile (as "
                                                 "mlx.distributed_config writes it)")
    p.add_argument("--run", metavar="ID", help="the hosts, model and data of this run")
    p.add_argument("--model", help="a model folder every host must have at the same path")
    p.add_argument("--data", help="a dataset folder every host must have at the same path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_check)


def _hosts_and_paths(args) -> tuple[list[str], list[str]]:
    from zyquo_tui.core.runs.hosts import HostfileError, distribution_of, read_hostfile

    given = [name for name in (args.hosts, args.hostfile, args.run) if name]
    if len(given) > 1:
        raise UserError("hosts check takes one of --hosts, --hostfile or --run.")
    paths = [str(Path(p).expanduser().resolve()) for p in (args.model, args.data) if p]
    try:
        if args.hosts:
            hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        elif args.hostfile:
            hosts = [entry.ssh for entry in read_hostfile(str(args.hostfile))[0]]
        elif args.run:
            from zyquo_tui.core.store.store import RunStore

            run = RunStore().get(args.run)
            found = distribution_of(run.hyperparameters.zyquo_tui)
            hosts = [entry.ssh for entry in found.hosts] if found else ["localhost"]
            paths += [run.model, run.data]
        else:
            hosts = ["localhost"]
    except HostfileError as error:
        raise UserError(str(error)) from None
    if not hosts:
        raise UserError("--hosts names no host; give names or addresses, comma-separated.")
    unique = list(dict.fromkeys(hosts))  # --ranks repeats this machine: check it once
    return unique, list(dict.fromkeys(paths))


def cmd_check(args) -> int:
    from zyquo_tui.core.system.host_checks import check_hosts

    hosts, paths = _hosts_and_paths(args)
    reports = check_hosts(hosts, paths)
    ready = all(report.ready for report in reports)
    if args.json:
        print_json({"ready": ready, "hosts": [report.to_json() for report in reports]})
    else:
        width = max(len(report.host) for report in reports)
        for report in reports:
            if report.ready:
                packages = report.facts.get("packages") or {}
                free = report.facts.get("free_memory_bytes")
                print(f"{report.host:<{width}}  ready: Python {report.facts.get('python')}, "
                      + ", ".join(f"{name} {version}" for name, version in packages.items())
                      + (f", {fmt_bytes(free)} free" if free else "")
                      + (", this machine (no SSH)" if report.local else ""))
            else:
                print(f"{report.host:<{width}}  not ready: {report.problem}")
    return EXIT_OK if ready else EXIT_PROBLEMS

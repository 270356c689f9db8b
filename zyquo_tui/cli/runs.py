"""`zyquo-tui runs ...`: create, start, queue, cancel, resume, fork, watch and inspect runs.

The same operations as the dashboard, over the same core. JSON outputs are documented in
docs/CLI.md and stay stable within a schema_version.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from zyquo_tui.cli.common import show_data, supervisor_for
from zyquo_tui.cli.output import fmt_bytes, fmt_loss, print_json
from zyquo_tui.cli.runs_list import add_list_parser, add_runs_parser
from zyquo_tui.cli.setting_flags import add_setting_flags, settings_given
from zyquo_tui.core.errors import EXIT_PROBLEMS, UserError
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.runs.settings import Method
from zyquo_tui.core.store.store import DamagedRun, RunStore

if TYPE_CHECKING:
    from zyquo_tui.core.events.metrics import RunMetrics

# The supervisor, the YAML config and the metrics are imported by the commands that use them:
# `runs list` over 10,000 runs must start fast (bench/bench_runs_list.py).

def register(subparsers, action: str | None = None) -> None:
    """The `runs` command and its actions; for `action` "list" only that one."""
    sub = add_runs_parser(subparsers)
    add_list_parser(sub)
    if action == "list":
        # Scripts call `runs list --json` over and over: the other actions' parsers (every
        # setting's flag) and the modules behind them (exports, checkpoints, try) cost it
        # more than listing 10,000 runs does. (main.py imports runs_list alone for it.)
        return

    p = sub.add_parser("new", help="configure a new run (prints its id)")
    p.add_argument("--model", help="model folder (MLX format), or a name as `zyquo-tui models` "
                                   "lists it")
    p.add_argument("--data", help="data folder with train.jsonl (valid.jsonl, test.jsonl)")
    p.add_argument("--method", choices=[m.value for m in Method],
                   help="default: qlora on a quantized model, else lora (lora on a quantized "
                        "model is qlora)")
    add_setting_flags(p)
    p.add_argument("--config", type=Path, help="an mlx-lm YAML config to start from (flags "
                                               "override it)")
    p.add_argument("--name", help="default: the model folder's name and the method")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_new)

    for name, handler, helptext in (
        ("start", cmd_start, "start a configured run now"),
        ("queue", cmd_queue, "add a run to the queue (or move it with --to)"),
        ("cancel", cmd_cancel, "stop a run (it saves a checkpoint first) or unqueue it"),
        ("resume", cmd_resume, "continue a cancelled, failed or interrupted run exactly"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("id")
        p.add_argument("--wait", action="store_true", help="block until the run ends")
        if name in ("start", "resume"):
            p.add_argument("--queue-if-busy", action="store_true",
                           help="queue the run when another is active (default: refuse)")
        if name in ("start", "queue"):
            p.add_argument("--override-memory", action="store_true",
                           help="start even though the memory verdict is \"won't fit\" "
                                "(recorded in the run)")
            p.add_argument("--override-disk", action="store_true",
                           help="start even though its checkpoints won't fit on the store's "
                                "disk (recorded in the run; the trainer still stops at the "
                                "floor)")
        if name == "resume":
            p.add_argument("--step", type=int, help="the checkpoint step (default: latest)")
        if name == "queue":
            p.add_argument("--to", type=int, metavar="POSITION",
                           help="move an already queued run to this position (1 = next)")
        p.set_defaults(handler=handler)

    p = sub.add_parser("recover", help="after a reboot: resume the runs that died with the "
                                       "machine, then continue the queue (what the service "
                                       "runs at boot)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_recover)

    p = sub.add_parser("dequeue", help="remove a run from the queue")
    p.add_argument("id")
    p.set_defaults(handler=cmd_dequeue)

    p = sub.add_parser("fork", help="a new run warm-started from a checkpoint of this one")
    p.add_argument("id")
    p.add_argument("--from-step", type=int, required=True)
    p.add_argument("--name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_fork)

    p = sub.add_parser("show", help="state, progress, losses, checkpoints and process")
    p.add_argument("id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("watch", help="a live progress line until the run ends")
    p.add_argument("id")
    p.set_defaults(handler=cmd_watch)

    p = sub.add_parser("logs", help="the trainer's log")
    p.add_argument("id")
    p.add_argument("--follow", "-f", action="store_true")
    p.set_defaults(handler=cmd_logs)

    p = sub.add_parser("delete", help="delete a run and its files (not a running one)")
    p.add_argument("id")
    p.set_defaults(handler=cmd_delete)

    p = sub.add_parser("export-config", help="the run as an mlx-lm YAML config")
    p.add_argument("id")
    p.add_argument("-o", "--output", type=Path)
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser("import-config", help="a new run from an mlx-lm YAML config")
    p.add_argument("file", type=Path)
    p.add_argument("--name")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_import)

    from zyquo_tui.cli import checkpoints_cmd, runs_compare

    runs_compare.register(sub)
    checkpoints_cmd.register(sub)

    # After training: try an adapter, export a fused model (each in its own module).
    from zyquo_tui.cli import export_cmd, try_cmd

    try_cmd.register(sub)
    export_cmd.register(sub)

    from zyquo_tui.cli import (
        grid_cmd,  # `runs grid`: many runs from comma-separated values
    )

    grid_cmd.register(sub)


# -- helpers ------------------------------------------------------------------------------------

def _wait_for(supervisor, run_id: str, wanted: RunState) -> int:
    import asyncio

    run = asyncio.run(supervisor.wait(run_id))
    print(f"{run_id} {run.state.value}")
    return 0 if run.state is wanted else EXIT_PROBLEMS


def memory_record_words(memory: dict) -> str:
    """The memory verdict a run's start recorded (made exact when it ended: docs/memory.md, "The
    gate"), in words: its figure, where the figure came from, and the verdict."""
    replica = memory.get("replica") or {}
    if replica.get("scale") == 1:
        source = "measured whole"
    elif replica:
        source = f"measured on a replica 1/{replica.get('scale')} as wide"
    else:
        source = "by the terms"
    rows = ("for its longest row" if memory.get("exact_sequence")
            else "for rows as long as max_seq_length (a bound)")
    return (f"{fmt_bytes(int(memory['estimate_bytes']))} {source} {rows}: "
            f"{memory.get('verdict', '?')}")


# -- commands -----------------------------------------------------------------------------------

def cmd_new(args) -> int:
    from zyquo_tui.cli.run_drafts import draft_from_command_line, refuse_rows_that_cannot_train
    from zyquo_tui.core.runs.mlx_config import load_mlx_yaml

    store = RunStore().ensure()
    if args.config:
        config, source, base_dir = load_mlx_yaml(args.config), str(args.config), args.config.parent
    elif not args.model or not args.data:
        raise UserError("runs new needs --model PATH and --data PATH (or --config FILE).")
    else:
        config, source, base_dir = {}, "the command line", None
    refused = "The run was not created: "
    draft = draft_from_command_line(
        config, source=source, base_dir=base_dir, refused=refused, model=args.model,
        data=args.data, settings=settings_given(args), method=args.method, name=args.name,
        config_file=args.config)
    run, unknown, warnings = draft.to_run(refused=refused), sorted(draft.extra_config), \
        draft.warnings()
    refuse_rows_that_cannot_train(draft, refused)
    store.create(run)
    _report_unknown(draft, unknown)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print_json({"id": run.id, "name": run.name, "warnings": warnings})
    else:
        print(run.id)
    return 0


def _report_unknown(draft, unknown: list[str]) -> None:
    """A note for each config key this version does not model (kept, and passed to mlx-lm
    unchanged), at its file:line, with the setting it may be a misspelling of: a mistyped
    `learning_rat` would otherwise train at the default learning rate unremarked."""
    import difflib

    from zyquo_tui.core.runs.mlx_config import setting_keys

    for key in unknown:
        near = difflib.get_close_matches(key, sorted(setting_keys()), n=1, cutoff=0.8)
        hint = f" (did you mean {near[0]}?)" if near else ""
        print(f"note: {draft.locate(key)}: {key} is not a setting this version models; it is "
              f"kept and passed to mlx-lm unchanged{hint}.", file=sys.stderr)


def cmd_start(args) -> int:
    supervisor = supervisor_for()
    run = supervisor.start(args.id, queue_if_busy=args.queue_if_busy,
                           override_memory=args.override_memory,
                           override_disk=args.override_disk)
    print(f"{run.id} {run.state.value}")
    return _wait_for(supervisor, run.id, RunState.COMPLETED) if args.wait else 0


def cmd_queue(args) -> int:
    supervisor = supervisor_for()
    if args.to is not None:
        order = supervisor.move(args.id, args.to)
        print("\n".join(f"{i + 1}. {run_id}" for i, run_id in enumerate(order)))
        return 0
    run = supervisor.enqueue(args.id, override_memory=args.override_memory,
                             override_disk=args.override_disk)
    position = supervisor.queue.position(run.id)
    print(f"{run.id} {run.state.value}" + (f" (position {position})" if position else ""))
    return _wait_for(supervisor, run.id, RunState.COMPLETED) if args.wait else 0


def cmd_recover(args) -> int:
    supervisor = supervisor_for()
    report = supervisor.recover()
    if args.json:
        print_json(report)
    else:
        for run_id in report["interrupted"]:
            print(f"{run_id} interrupted: its trainer and runner are gone")
        for resumed in report["resumed"]:
            print(f"{resumed['id']} resumed from step {resumed['step']} ({resumed['state']})")
        for skipped in report["not_resumed"]:
            print(f"{skipped['id']} not resumed: {skipped['reason']}")
        if report["queue_started"]:
            print(f"queue started ({len(report['queue'])} waiting)")
        if not any(report[key] for key in ("interrupted", "resumed", "not_resumed",
                                           "queue_started")):
            print("Nothing to recover.")
    failed = [skipped for skipped in report["not_resumed"] if not skipped.get("served")]
    return EXIT_PROBLEMS if failed and supervisor.settings.auto_resume else 0


def cmd_dequeue(args) -> int:
    run = supervisor_for().dequeue(args.id)
    print(f"{run.id} {run.state.value}")
    return 0


def cmd_cancel(args) -> int:
    supervisor = supervisor_for()
    run = supervisor.cancel(args.id)
    if run.state is RunState.CONFIGURED:
        print(f"{run.id} removed from the queue")
        return 0
    print(f"{run.id} cancelling (it saves a checkpoint and stops)")
    return _wait_for(supervisor, run.id, RunState.CANCELLED) if args.wait else 0


def cmd_resume(args) -> int:
    supervisor = supervisor_for()
    run = supervisor.resume(args.id, args.step, queue_if_busy=args.queue_if_busy)
    from zyquo_tui.core.processes.supervisor import resume_point

    print(f"{run.id} {run.state.value} ({resume_point(run)})")
    return _wait_for(supervisor, run.id, RunState.COMPLETED) if args.wait else 0


def cmd_fork(args) -> int:
    run = supervisor_for().fork(args.id, args.from_step, name=args.name)
    if args.json:
        print_json({"id": run.id, "name": run.name, "lineage": run.lineage})
    else:
        print(run.id)
    return 0


def cmd_show(args) -> int:
    store = RunStore()
    run = supervisor_for(store).get(args.id)
    data = show_data(store, run)
    if args.json:
        print_json(data)
        return 0
    p = data["progress"]
    print(f"{run.id}  {run.name}")
    print(f"state      {run.state.value}" + (f" (queue position {data['queue_position']})"
                                             if data["queue_position"] else ""))
    print(f"method     {run.method.value} on {run.model}")
    print(f"data       {run.data}")
    print(f"step       {p['step']}/{p['iters']}")
    print(f"train loss {fmt_loss(p['last_train_loss'])}   val loss "
          f"{fmt_loss(p['last_val_loss'])}   best val {fmt_loss(p['best_val_loss'])}"
          + (f" @ {p['best_val_step']}" if p["best_val_step"] is not None else ""))
    if p.get("reward_mean") is not None:
        print(f"reward     {p['reward_mean']:.4g} (mean of the sampled answers, last report)")
    if p.get("last_eval") is not None:
        from zyquo_tui.core.processes.evaluation import eval_event_text

        print(f"eval       {eval_event_text(p['last_eval'])}")
    ranks = (run.process or {}).get("ranks") or []
    if p["peak_memory_bytes"]:
        resident = (f", {fmt_bytes(int(p['peak_rss_bytes']))} resident"
                    if p.get("peak_rss_bytes") else "")
        # A run on several processes reports rank 0's figures, and each rank's MLX peak.
        each = p.get("rank_peak_memory_bytes") or []
        per_rank = (" (rank 0; each rank: " + ", ".join(fmt_bytes(b) for b in each) + " MLX)"
                    if len(each) > 1 else "")
        print(f"peak mem   {fmt_bytes(int(p['peak_memory_bytes']))} MLX{resident}{per_rank}")
    if run.memory and run.memory.get("estimate_bytes"):
        # Between the trainer's end and the runner's record (which may measure the config for
        # it first: seconds), a finished run's record is still the one it started with.
        settling = (run.state.is_terminal and "returncode" not in (run.process or {})
                    and not (run.memory.get("exact_sequence") and run.memory.get("replica")))
        print(f"estimated  {memory_record_words(run.memory)}"
              + ("; its runner is recording the end, and may measure the config for it "
                 "(seconds)" if settling else ""))
    if len(ranks) > 1:
        print(f"ranks      {len(ranks)} processes (mlx.launch): "
              + ", ".join(f"r{r.get('rank')} on {r.get('host')}" for r in ranks))
    if data["stopped"]:
        print(f"stopped    {data['stopped']['message']}")
    for step in run.memory_steps:  # out of memory, resumed one rung down (unattended.md)
        where = (f"step {step['from_step']}" if step.get("from_step") is not None
                 else "the start")
        print(f"stepped    down {step.get('rung')}: {step.get('change')}, from {where}")
    if run.failure:
        print(f"failure    {run.failure.get('cause')}: {run.failure.get('message')}")
        print(f"try        {run.failure.get('suggestion')}")
    for warning in data["warnings"]:
        print(f"warning    {warning}")
    if data["checkpoints"]:
        print("checkpoints")
        for c in data["checkpoints"]:
            mark = " best" if c["best"] else ""
            resumable = "" if c["resumable"] else " (weights only)"
            print(f"  step {c['step']:>7}  val {fmt_loss(c['val_loss']):>8}  "
                  f"{fmt_bytes(c['bytes'])}{resumable}{mark}")
    if run.process and run.process.get("pid"):
        print(f"process    pid {run.process['pid']} on {run.process.get('host')}")
    print(f"folder     {data['run_dir']}")
    return 0


def progress_line(run_id: str, metrics: "RunMetrics") -> str:
    s = metrics.summary()
    parts = [f"{run_id}", f"step {s['step']}/{s['iters'] or '?'}"]
    if s["last_train_loss"] is not None:
        parts.append(f"train {s['last_train_loss']:.4f}")
    if s["last_val_loss"] is not None:
        parts.append(f"val {s['last_val_loss']:.4f}")
    if s["tokens_per_second"]:
        parts.append(f"{s['tokens_per_second']:.0f} tok/s")
    if s["eta_seconds"] is not None:
        parts.append(f"eta {int(s['eta_seconds'])}s")
    return "  ".join(parts)


def cmd_watch(args) -> int:
    from zyquo_tui.core.events.metrics import RunMetrics

    supervisor = supervisor_for()
    run = supervisor.get(args.id)
    metrics = RunMetrics()

    async def follow() -> None:
        last_line = ""
        async for batch in supervisor.follow_batches(run.id):
            metrics.ingest(batch)
            for event in batch:  # out of memory, and resumed one rung down the ladder
                if event.get("type") == ev.STEP_DOWN:
                    print(f"{run.id}  stepped down: {event.get('message')}", flush=True)
            line = progress_line(run.id, metrics)
            if line != last_line:
                print(line, flush=True)
                last_line = line

    import asyncio

    asyncio.run(follow())
    final = supervisor.get(run.id)
    message = f"{run.id} {final.state.value}"
    if final.failure:
        message += f": {final.failure.get('message')}"
    print(message, flush=True)
    return 0 if final.state is RunState.COMPLETED else EXIT_PROBLEMS


def cmd_logs(args) -> int:
    store = RunStore()
    supervisor = supervisor_for(store)
    run = supervisor.get(args.id)
    from zyquo_tui.core.store.logs import LogReader

    reader = LogReader(store.log_path(run.id))  # every file of the log, across rotations
    while True:
        chunk = reader.read_new()
        if chunk:
            sys.stdout.write(chunk.decode("utf-8", errors="replace"))
            sys.stdout.flush()
        if not args.follow:
            return 0
        run = supervisor.get(run.id)
        if not run.state.is_active and run.state is not RunState.QUEUED and not chunk:
            return 0
        time.sleep(0.5)


def cmd_delete(args) -> int:
    store = RunStore()
    supervisor = supervisor_for(store)
    record = store.record(args.id)
    if isinstance(record, DamagedRun):
        # Its run.json cannot say what it is doing; asked to delete it, that is the user's call.
        with supervisor.queue.locked() as order:
            if record.id in order:
                order.remove(record.id)
        store.delete(record.id)
        print(f"{record.id} deleted (its run.json was damaged: {record.reason})")
        return 0
    run = supervisor.get(args.id)
    if run.state.is_active:
        raise UserError(f"Run {run.id} is {run.state.value}; cancel it before deleting it.")
    if run.state is RunState.QUEUED:
        supervisor.dequeue(run.id)
    store.delete(run.id)
    print(f"{run.id} deleted")
    return 0


def cmd_export(args) -> int:
    from zyquo_tui.core.runs.mlx_config import dump_mlx_yaml, run_to_mlx_config

    store = RunStore()
    run = store.get(args.id)
    # adapter_path stays mlx-lm's relative default, so running the export never writes into
    # this run's own checkpoints (the run folder's config.yaml has the exact path).
    text = dump_mlx_yaml(run_to_mlx_config(run))
    if args.output:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as error:
            raise UserError(f"Cannot write the config to {args.output} (-o): "
                            f"{error.strerror or error}; give -o a file in a folder you can "
                            "write.") from None
        print(str(args.output))
    else:
        sys.stdout.write(text)
    return 0


def cmd_import(args) -> int:
    from zyquo_tui.cli.run_drafts import draft_from_command_line, refuse_rows_that_cannot_train
    from zyquo_tui.core.runs.mlx_config import load_mlx_yaml

    store = RunStore().ensure()
    config = load_mlx_yaml(args.file)
    draft = draft_from_command_line(config, source=str(args.file), base_dir=args.file.parent,
                                    refused="", name=args.name, config_file=args.file)
    run, unknown, warnings = draft.to_run(), sorted(draft.extra_config), draft.warnings()
    refuse_rows_that_cannot_train(draft, "The run was not created: ")
    store.create(run)
    _report_unknown(draft, unknown)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print_json({"id": run.id, "name": run.name, "unknown_keys": unknown,
                    "warnings": warnings})
    else:
        print(run.id)
    return 0

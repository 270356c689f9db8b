"""`zyquo-tui runs export` and `runs exports`: a run's adapter fused into a model folder, checked.

The export is a background job (core/processes/exports.py) that outlives this command; the
command follows it to its end, unless told not to wait.
"""

from __future__ import annotations

import sys
from pathlib import Path

from zyquo_tui.cli.output import fmt_loss, print_json, print_table
from zyquo_tui.core.errors import EXIT_PROBLEMS
from zyquo_tui.core.processes import exports
from zyquo_tui.core.store.store import RunStore


def register(runs_subparsers) -> None:
    p = runs_subparsers.add_parser(
        "export", help="fuse the adapter into the model (a checked model folder)")
    p.add_argument("id")
    p.add_argument("--step", type=int, help="the checkpoint step (default: the latest)")
    p.add_argument("-o", "--output", type=Path, metavar="DIR",
                   help="the new model folder (default: $ZYQUO_HOME/models/NAME-stepN)")
    p.add_argument("--dequantize", action="store_true",
                   help="float weights from a quantized base (the default)")
    p.add_argument("--quantize", type=int, choices=exports.QUANTIZE_BITS, metavar="{4,8}",
                   help="quantize the fused weights to 4 or 8 bits")
    p.add_argument("--gguf", action="store_true",
                   help=f"also write {'ggml-model-f16.gguf'} (llama, mistral, mixtral)")
    p.add_argument("--no-wait", action="store_true",
                   help="print the job's id and return; the export goes on in the background")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_export)

    p = runs_subparsers.add_parser("exports", help="export jobs and how they ended")
    p.add_argument("id", nargs="?", help="a run id: only its exports")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_exports)


def cmd_export(args) -> int:
    store = RunStore()
    job = exports.start_export(store, args.id, step=args.step, output=args.output,
                               dequantize=args.dequantize, quantize=args.quantize,
                               gguf=args.gguf)
    if args.no_wait:
        if args.json:
            print_json(job.to_json())
        else:
            print(job.id)
        return 0
    if not args.json:
        print(f"export {job.id}: step {job.step} of run {job.run_id} to {job.output}",
              file=sys.stderr)

    def said(current: exports.ExportJob) -> None:
        if not args.json and current.state == exports.RUNNING:
            print(f"  {current.phase}…", file=sys.stderr, flush=True)
    try:
        job = exports.wait(store.home, job.id, on_change=said)
    except KeyboardInterrupt:
        print(f"\nThe export goes on in the background; `zyquo-tui runs exports {job.run_id}` "
              "shows how it ends.", file=sys.stderr)
        return 130
    if args.json:
        print_json(job.to_json())
    elif job.state == exports.COMPLETED:
        print(job.message)
        if job.listed_as:
            print(f"listed in the models as {Path(job.listed_as).name}")
    else:
        print(f"zyquo-tui: {job.message}", file=sys.stderr)
    return 0 if job.state == exports.COMPLETED else EXIT_PROBLEMS


def cmd_exports(args) -> int:
    store = RunStore()
    jobs = exports.list_jobs(store.home, args.id)
    if args.id and not jobs:
        # An unknown run is refused as every command refuses it (exit 2); a deleted run's
        # jobs, still on record, are listed all the same.
        store.get(args.id)
    if args.json:
        print_json([job.to_json() for job in jobs])
        return 0
    if not jobs:
        print("No exports yet. Start one with `zyquo-tui runs export ID`.")
        return 0
    print_table(["JOB", "RUN", "STEP", "WEIGHTS", "STATE", "FUSED", "ADAPTER", "OUTPUT"],
                [[job.id, job.run_id, job.step, job.weights,
                  job.phase if job.state == exports.RUNNING else job.state,
                  fmt_loss((job.check or {}).get("fused_loss")),
                  fmt_loss((job.check or {}).get("adapter_loss")), job.output]
                 for job in jobs])
    return 0

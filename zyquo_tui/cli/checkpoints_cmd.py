"""`zyquo-tui runs checkpoints ID`: a run's checkpoints, and what the dashboard's checkpoints
screen does to them (`d` delete one, `t` retention), for scripts and plain terminals."""

from __future__ import annotations

from zyquo_tui.cli.common import show_data, supervisor_for
from zyquo_tui.cli.output import print_json, print_table
from zyquo_tui.core.errors import UserError
from zyquo_tui.core.formatting import fmt_bytes, fmt_loss
from zyquo_tui.core.runs.run import RunState
from zyquo_tui.core.store.checkpoints import list_checkpoints
from zyquo_tui.core.store.retention import (
    RetentionPolicy,
    apply_retention,
    delete_checkpoint,
    deletion_refusal,
    load_policy,
    save_policy,
)
from zyquo_tui.core.store.store import RunStore


def register(runs_subparsers) -> None:
    """Add `checkpoints` to the `runs` group."""
    p = runs_subparsers.add_parser(
        "checkpoints", help="a run's checkpoints; delete one, or choose which a run keeps")
    p.add_argument("id")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--delete", type=int, metavar="STEP",
                        help="delete the checkpoint of this step (not an active run's newest)")
    action.add_argument("--keep-last", type=int, metavar="N",
                        help="retention: keep the best and the last N when the run completes "
                             "(at once, if it has)")
    action.add_argument("--keep-all", action="store_true",
                        help="retention: keep every checkpoint (the default)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_checkpoints)


def cmd_checkpoints(args) -> int:
    store = RunStore()
    run = supervisor_for(store).get(args.id)  # an unknown id is one sentence, exit 2
    said = None
    if args.delete is not None:
        checkpoints = list_checkpoints(store.adapters_dir(run.id))
        chosen = next((c for c in checkpoints if c.step == args.delete), None)
        if chosen is None:
            steps = ", ".join(str(c.step) for c in checkpoints) or "none"
            raise UserError(f"Run {run.id} has no checkpoint at step {args.delete}; it has "
                            f"{steps}.")
        refusal = deletion_refusal(run, chosen, checkpoints)
        if refusal:
            raise UserError(refusal)
        delete_checkpoint(chosen)
        said = f"Deleted the checkpoint of step {chosen.step}."
    elif args.keep_last is not None or args.keep_all:
        if args.keep_last is not None and args.keep_last < 1:
            raise UserError(f"--keep-last must be at least 1, not {args.keep_last}; "
                            "--keep-all keeps every checkpoint.")
        policy = RetentionPolicy(args.keep_last) if args.keep_last is not None else None
        save_policy(store.run_dir(run.id), policy)
        said = f"Run {run.id}: {policy.describe() if policy else 'keep every checkpoint'}"
        if policy is not None and run.state is RunState.COMPLETED:
            removed = apply_retention(store, run.id)
            said += (f", applied now: removed steps {', '.join(map(str, removed))}."
                     if removed else ", applied now: nothing to remove.")
        else:
            said += " when it completes."
    shown = show_data(store, store.get(run.id))
    if args.json:
        policy = load_policy(store.run_dir(run.id))
        print_json({"id": run.id, "checkpoints": shown["checkpoints"],
                    "retention": policy.to_dict() if policy else None})
        return 0
    if said:
        print(said)
    rows = [[c["step"], fmt_loss(c["val_loss"]), "best" if c["best"] else "",
             "exact" if c["resumable"] else "weights only", fmt_bytes(c["bytes"])]
            for c in shown["checkpoints"]]
    if rows:
        print_table(["STEP", "VAL", "", "RESUME", "SIZE"], rows)
    else:
        print(f"Run {run.id} has no checkpoint yet.")
    return 0

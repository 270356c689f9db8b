"""`zyquo-tui runs list [--json]`: every run with its state and progress.

Scripts call it over and over, on stores of 10,000 runs (bench/bench_runs_list.py, < 0.5 s), so
this module imports only the store and its listing index: the run record, the settings and the
supervisor are imported when a row must be read again (a run that changed, or one listed as
running whose trainer may be gone). `runs list --json` to a pipe writes the index's row texts
as they are, without decoding and encoding them again.
"""

from __future__ import annotations

import json
import sys

from zyquo_tui.core.store.index import LIVE_STATES, listing_entries
from zyquo_tui.core.store.queue import RunQueue
from zyquo_tui.core.store.store import RunStore


def add_runs_parser(subparsers):
    """The `runs` command's parser; returns its sub-parsers, for the actions."""
    runs = subparsers.add_parser("runs", help="create, start, watch and manage runs")
    return runs.add_subparsers(dest="runs_command", metavar="ACTION", parser_class=type(runs))


def add_list_parser(sub) -> None:
    p = sub.add_parser("list", help="every run with its state and progress")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_list)


def register(subparsers, action: str | None = None) -> None:
    """`runs` with only its `list` action: what `zyquo-tui runs list` parses."""
    add_list_parser(add_runs_parser(subparsers))


def _live_row_text(store: RunStore, run_id: str) -> str:
    """The row of a run listed as starting or running, after asking whether its trainer lives."""
    from zyquo_tui.cli.common import supervisor_for
    from zyquo_tui.core.store.index import listing_row, row_text

    return row_text(listing_row(supervisor_for(store).refresh(store.get(run_id))))


def listed_texts(store: RunStore) -> list[str]:
    """Every run's row as JSON text with its queue position, as `runs list --json` prints it."""
    positions = {run_id: i + 1 for i, run_id in enumerate(RunQueue(store.home).ids())}
    waiting_for = "null"
    if positions:  # one small read, only when runs wait: what holds the machine if no run does
        from zyquo_tui.core.processes.machine_hold import holder_words

        words = holder_words(store.home)
        waiting_for = "null" if words is None else json.dumps(words)
    texts = []
    for entry in listing_entries(store):
        text = _live_row_text(store, entry.id) if entry.state in LIVE_STATES else entry.text
        # Every row is an object: its last "}" closes it, so the position goes just before.
        position = positions.get(entry.id)
        position_text = "null" if position is None else str(position)
        waits = waiting_for if position is not None else "null"
        texts.append(f'{text[:-1]}, "queue_position": {position_text}, "waiting_for": {waits}}}')
    return texts


def cmd_list(args) -> int:
    store = RunStore()
    texts = listed_texts(store)
    if args.json:
        if sys.stdout.isatty():  # indented for a person at a terminal
            from zyquo_tui.cli.output import print_json

            print_json(json.loads("[" + ", ".join(texts) + "]"))
        else:
            sys.stdout.write("[" + ", ".join(texts) + "]\n")
        return 0
    if not texts:
        print("No runs yet. Create one with `zyquo-tui runs new --model PATH --data PATH`.")
        return 0
    from zyquo_tui.cli.output import fmt_loss, print_table
    from zyquo_tui.core.formatting import fmt_reward

    rows = json.loads("[" + ", ".join(texts) + "]")
    print_table(
        ["ID", "STATE", "NAME", "STEP", "TRAIN", "VAL", "Q"],
        [[r["id"], r["state"], r["name"] or r.get("damaged"),
          "" if r["state"] == "damaged" else f"{r['step']}/{r['iters'] or '?'}",
          fmt_reward(r["reward_mean"]) if r.get("reward_mean") is not None
          else fmt_loss(r.get("last_train_loss")), fmt_loss(r.get("last_val_loss")),
          r.get("queue_position") or ""] for r in rows])
    waiting_for = next((r["waiting_for"] for r in rows if r.get("waiting_for")), None)
    if waiting_for:
        print(f"Queued runs wait for {waiting_for}, which holds the machine while it has "
              "models loaded (docs/tinker-server.md).")
    return 0

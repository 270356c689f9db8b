"""`zyquo-tui runs compare ID ID [ID...] [--json]`: the settings that differ between runs and
how each went (core/store/comparison.py)."""

from __future__ import annotations

from zyquo_tui.cli.output import print_json, print_table
from zyquo_tui.core.formatting import DASH, fmt_bytes, fmt_duration, fmt_loss, fmt_rate
from zyquo_tui.core.store.store import RunStore


def register(runs_subparsers) -> None:
    """Add `compare` to the `runs` group."""
    p = runs_subparsers.add_parser(
        "compare", help="the settings that differ between runs, and how each went")
    p.add_argument("ids", nargs="+", metavar="ID", help="two run ids or more")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_compare)


def cmd_compare(args) -> int:
    # Imported here: `runs list` registers this command too and must start fast.
    from zyquo_tui.core.store.comparison import (
        compare_runs,
        letters,
        setting_text,
        stop_text,
    )

    comparison = compare_runs(RunStore(), list(args.ids))
    if args.json:
        print_json(comparison.to_dict())
        return 0
    names = letters(len(comparison.figures))
    print_table(
        ["", "ID", "NAME", "STATE", "BEST VAL", "AT", "FINAL TRAIN", "TOK/S", "PEAK MEM", "TIME",
         "STOPPED"],
        [[letter, f.id, f.name, f.state, fmt_loss(f.best_val_loss),
          DASH if f.best_val_step is None else f.best_val_step, fmt_loss(f.final_train_loss),
          fmt_rate(f.tokens_per_second), fmt_bytes(f.peak_memory_bytes),
          fmt_duration(f.duration_seconds), stop_text(f.stop_reason)]
         for letter, f in zip(names, comparison.figures)])
    if any(f.metrics.rank_peaks for f in comparison.figures):
        print("PEAK MEM of a run on several processes is its largest process's.")
    print()
    if not comparison.differences:
        print("The runs have the same settings.")
        return 0
    print("Settings that differ:")
    print_table(["SETTING", *names],
                [[key, *(setting_text(key, value) for value in values)]
                 for key, values in comparison.differences.items()])
    return 0

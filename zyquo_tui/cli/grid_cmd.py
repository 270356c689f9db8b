"""`zyquo-tui runs grid`: one run per combination of settings, grouped, optionally queued.

Every `runs new` setting flag takes several values, comma-separated (`--learning-rate
1e-4,3e-4 --rank 8,16` makes four runs); a setting whose value is itself a list (--lora-keys,
--hosts, --lr-schedule-arguments) takes its alternatives separated by `;`. Each run is named by
its values and carries the grid's group id. Every combination is checked before any run is
made: a bad one makes none (exit status 2).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

from zyquo_tui.cli.output import print_json
from zyquo_tui.core.errors import UserError
from zyquo_tui.core.runs.run import new_run_id
from zyquo_tui.core.runs.settings import BOOL, NAMES, NUMBERS, SETTINGS, Method
from zyquo_tui.core.runs.value_checks import value_text

LIST_KINDS = (NAMES, NUMBERS)  # values that hold commas themselves: alternatives split on ";"
MAX_RUNS = 256


def register(sub) -> None:
    p = sub.add_parser("grid", help="one run per combination of comma-separated setting "
                                    "values, grouped (and queued with --queue)")
    p.add_argument("--model", required=True, help="model folder (MLX format), or a name as "
                                                  "`zyquo-tui models` lists it")
    p.add_argument("--data", required=True, help="data folder with train.jsonl")
    p.add_argument("--method", choices=[m.value for m in Method])
    for key, setting in SETTINGS.items():
        separator = ";" if setting.kind in LIST_KINDS else ","
        p.add_argument(setting.flag, dest=f"grid_{key}", metavar="V" + separator + "V...",
                       help=f"{setting.label.lower()}: one value, or several separated by "
                            f"'{separator}'")
    p.add_argument("--name", help="the start of each run's name (default: the model folder's "
                                  "name and the method)")
    p.add_argument("--queue", action="store_true", help="queue every run (they run one after "
                                                        "another)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_grid)


def grid_values(args: argparse.Namespace) -> dict[str, list[Any]]:
    """Each setting given, with its values in the order given."""
    values: dict[str, list[Any]] = {}
    for key, setting in SETTINGS.items():
        text = getattr(args, f"grid_{key}", None)
        if text is None:
            continue
        separator = ";" if setting.kind in LIST_KINDS else ","
        parts = [p.strip() for p in text.split(separator)]
        if not any(parts):
            raise UserError(f"{setting.flag} has no value; give one or more, separated by "
                            f"'{separator}'.")
        if not all(parts):
            raise UserError(f"{setting.flag} {text!r} has an empty value between its "
                            f"'{separator}'s; give each value once.")
        parsed = [setting.parse(part) for part in parts]
        repeated = next((part for i, part in enumerate(parts) if parsed[i] in parsed[:i]), None)
        if repeated is not None:
            raise UserError(f"{setting.flag} gives {repeated} twice, which would make two "
                            "identical runs; give each value once.")
        values[key] = parsed
    return values


def combinations(values: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(values)
    return [dict(zip(keys, chosen)) for chosen in itertools.product(*values.values())]


def label(combo: dict[str, Any], varied: list[str]) -> str:
    """How a run's name tells it from its siblings: `learning_rate=0.0001 rank=8`."""
    def text(key: str) -> str:
        value = combo[key]
        if SETTINGS[key].kind == BOOL:
            return "on" if value else "off"
        return value_text(value).replace(", ", ",")
    return " ".join(f"{key}={text(key)}" for key in varied)


def cmd_grid(args) -> int:
    from zyquo_tui.cli.common import supervisor_for
    from zyquo_tui.cli.run_drafts import draft_from_command_line, refuse_rows_that_cannot_train
    from zyquo_tui.core.store.store import RunStore

    values = grid_values(args)
    combos = combinations(values)
    if len(combos) > MAX_RUNS:
        raise UserError(f"The grid makes {len(combos)} runs, more than {MAX_RUNS}; give fewer "
                        "values.")
    varied = [key for key, options in values.items() if len(options) > 1]
    group = f"grid-{new_run_id()}"
    store = RunStore().ensure()
    runs, warnings = [], []
    for combo in combos:
        named = label(combo, varied)
        refused = f"No run was created ({named or 'the grid'}): "
        draft = draft_from_command_line({}, source="the command line", base_dir=None,
                                        refused=refused, model=args.model, data=args.data,
                                        settings=combo, method=args.method)
        run, warned = draft.to_run(refused=refused), draft.warnings()
        base = args.name or run.name
        run.name = f"{base} {named}".strip()
        run.group = group
        runs.append((run, combo))
        warnings += [w for w in warned if w not in warnings]
    refuse_rows_that_cannot_train(draft, "No run was created: ")  # one dataset for them all
    for run, _combo in runs:
        store.create(run)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.queue:
        supervisor = supervisor_for(store)
        for run, _combo in runs:
            supervisor.enqueue(run.id)
    if args.json:
        print_json({"group": group, "queued": bool(args.queue),
                    "runs": [{"id": run.id, "name": run.name,
                              "values": {key: combo[key] for key in varied}}
                             for run, combo in runs]})
    else:
        for run, _combo in runs:
            print(f"{run.id}  {run.name}" + ("  queued" if args.queue else ""))
    return 0

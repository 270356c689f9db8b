"""`zyquo-tui sample`: build the tiny sample model offline and show the sample datasets."""

from __future__ import annotations

from zyquo_tui.cli.output import print_json
from zyquo_tui.core.library.sample import build_sample


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sample", help="build the tiny sample model, a 4-bit copy and a distillation teacher "
                       "into $ZYQUO_HOME/models")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def run(args) -> int:
    made = build_sample()
    if args.json:
        print_json(made)
    else:
        for name, path in made["models"].items():
            print(f"model    {name}: {path}")
        print(f"datasets {made['sample_data']}")
    return 0

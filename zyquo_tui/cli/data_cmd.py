"""`zyquo-tui data ...`: list datasets, and check one before a run starts.

    zyquo-tui data check PATH [--model MODEL] [--max-seq-length N] [--batch-size N] [--json]
    zyquo-tui data convert SOURCE -o FOLDER [--format chat|completions]
                           [--prompt-feature K --completion-feature K]
                           [--valid-fraction F] [--test-fraction F] [--seed S] [--json]
    zyquo-tui data list [--json]

`check` exits 0 when the data is valid (warnings allowed), 1 when it found problems or rows
mlx-lm's LoRA trainer cannot train (preference rows), 2 for bad usage (a path or model that
does not exist). `convert` exits 0 when it wrote the folder, 1 when a source row cannot be
converted (the first one named at FILE:LINE or FILE:row N; nothing written), 2 for bad usage.
JSON output is documented in docs/models-and-datasets.md (schema_version 1).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from zyquo_tui.cli.output import fmt_bytes, print_json, print_table
from zyquo_tui.core.errors import EXIT_OK, EXIT_PROBLEMS, UserError
from zyquo_tui.core.library.dataset_conversion import (
    DEFAULT_SEED,
    DEFAULT_VALID_FRACTION,
    convert_dataset,
    row_sources,
)
from zyquo_tui.core.library.dataset_files import MAX_PROBLEMS_LISTED
from zyquo_tui.core.library.datasets import (
    DEFAULT_BATCH_SIZE,
    DatasetReport,
    discover_datasets,
    validate_dataset,
)
from zyquo_tui.core.library.models import resolve_model
from zyquo_tui.core.library.row_conversion import ALPACA, SHAREGPT, TARGET_FORMATS, row_shape
from zyquo_tui.core.library.source_rows import first_row
from zyquo_tui.core.library.rows import DatasetProblem, objectives_for, training_refusal
from zyquo_tui.core.library.token_stats import (
    DEFAULT_MAX_SEQ_LENGTH,
    TokenStats,
    TokenStatsFailed,
    measure_tokens,
)

SCHEMA_VERSION = 1


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 0.5:
        raise argparse.ArgumentTypeError(f"{value} must be at least 0 and below 0.5")
    return value


def register(subparsers) -> None:
    data = subparsers.add_parser("data", help="list datasets and check one before a run")
    sub = data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=type(data))

    p = sub.add_parser("check", help="validate a dataset folder (or one .jsonl file)")
    p.add_argument("path", type=Path, help="a folder with train.jsonl (valid, test), or a file")
    p.add_argument("--model", help="model folder or name from `zyquo-tui models`: adds token "
                                   "statistics with its tokenizer and chat template")
    p.add_argument("--max-seq-length", type=_positive, default=None,
                   help=f"count rows longer than this (needs --model; default "
                        f"{DEFAULT_MAX_SEQ_LENGTH}, mlx-lm's)")
    p.add_argument("--batch-size", type=_positive, default=DEFAULT_BATCH_SIZE,
                   help=f"the run's batch size (default {DEFAULT_BATCH_SIZE}, mlx-lm's)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_check)

    p = sub.add_parser("convert", help="turn ShareGPT, Alpaca, renamed columns or parquet "
                                       "into a folder mlx-lm reads")
    p.add_argument("source", type=Path, help="a .jsonl, .json or .parquet file, or a folder "
                                             "of them (as the Hugging Face hub serves them)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FOLDER",
                   help="the dataset folder to write (train, valid, test.jsonl)")
    p.add_argument("--format", choices=TARGET_FORMATS, default=None,
                   help="the rows to write (default: chat for ShareGPT, completions for "
                        "Alpaca and renamed columns, mlx-lm rows as they are)")
    p.add_argument("--prompt-feature", metavar="K", help="the column holding the prompt")
    p.add_argument("--completion-feature", metavar="K", help="the column holding the answer")
    p.add_argument("--valid-fraction", type=_fraction, default=DEFAULT_VALID_FRACTION,
                   metavar="F", help=f"rows held out for valid.jsonl when the source has no "
                                     f"split of its own (default {DEFAULT_VALID_FRACTION})")
    p.add_argument("--test-fraction", type=_fraction, default=None, metavar="F",
                   help="rows held out for test.jsonl (default: the valid fraction)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help=f"the seed of the held-out rows' choice (default {DEFAULT_SEED})")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_convert)

    p = sub.add_parser("list", help="datasets in $ZYQUO_HOME/datasets and the samples")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_list)


def cmd_check(args) -> int:
    path: Path = args.path
    if not path.exists():
        raise UserError(f"{path} does not exist: give a dataset folder (with train.jsonl) or "
                        "a .jsonl file.")
    if args.max_seq_length is not None and not args.model:
        raise UserError("--max-seq-length needs --model: token counts come from the model's "
                        "tokenizer.")
    model_path = resolve_model(args.model).path if args.model else None
    max_seq_length = args.max_seq_length or DEFAULT_MAX_SEQ_LENGTH

    report = validate_dataset(path, batch_size=args.batch_size)
    stats: TokenStats | None = None
    skipped = ""
    if model_path is not None:
        if report.errors:
            skipped = "the data has errors; fix them first"
        elif not report.files:
            skipped = "there is no data file"
        else:
            try:
                stats = measure_tokens(path, model_path, max_seq_length)
            except TokenStatsFailed as failure:
                # The model cannot tokenize this data: a problem found, like a bad row.
                source = (row_sources(failure.file, [failure.line]).get(failure.line)
                          if failure.file and failure.line else None)
                report.folder_problems.append(
                    DatasetProblem(failure.file or str(model_path), failure.line,
                                   failure.message, source=source))

    suggestion = _convert_suggestion(path)
    if args.json:
        print_json({**_check_json(report, args.batch_size, stats, skipped),
                    "suggestion": suggestion})
    else:
        _print_check(report, stats, skipped)
        if suggestion:
            print(suggestion)
    return EXIT_OK if report.ok and not training_refusal(report.format) else EXIT_PROBLEMS


def _convert_suggestion(path: Path) -> str | None:
    """The convert command, for rows written as ShareGPT or Alpaca (mlx-lm reads neither)."""
    file = path / "train.jsonl" if path.is_dir() else path
    if file.suffix in (".parquet", ".arrow"):
        return (f"mlx-lm reads JSON Lines, not {file.suffix[1:]}: `zyquo-tui data convert "
                f"{path} -o FOLDER` writes its rows as a dataset folder (--data takes parquet "
                "as it is, and converts it).")
    row = first_row(file) if file.is_file() else None
    shape = row_shape(row) if isinstance(row, dict) else None
    if shape is None or shape.kind not in (SHAREGPT, ALPACA):
        return None
    return (f"These are {shape.kind} rows, which mlx-lm does not read: `zyquo-tui data "
            f"convert {path} -o FOLDER` writes them as {shape.default_format} rows.")


def cmd_convert(args) -> int:
    if not args.source.exists():
        raise UserError(f"{args.source} does not exist: give a .jsonl, .json or .parquet file, "
                        "or a folder of them.")
    summary = convert_dataset(args.source, args.output, target=args.format,
                              prompt_feature=args.prompt_feature,
                              completion_feature=args.completion_feature,
                              valid_fraction=args.valid_fraction,
                              test_fraction=args.test_fraction, seed=args.seed)
    if args.json:
        print_json({"schema_version": SCHEMA_VERSION, **summary.to_json()})
        return EXIT_OK
    rows = ", ".join(f"{split} {count} rows" for split, count in summary.rows.items())
    written = summary.format or "mlx-lm"
    print(f"{summary.folder}: {summary.shape} rows written as {written} rows; {rows}")
    print(f"where each row came from: {summary.folder / 'sources'} (`data check` and runs "
          "name it beside a problem)")
    return EXIT_OK


def _check_json(report: DatasetReport, batch_size: int, stats: TokenStats | None,
                skipped: str) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "path": report.path,
        "valid": report.ok,
        "format": report.format,
        "batch_size": batch_size,
        "rows": report.rows,
        "duplicate_rows": {split: f.duplicate_rows for split, f in report.files.items()},
        "errors": report.errors,
        "warnings": report.warnings,
        "problems": [problem.to_json() for problem in report.problems],
        "problems_not_listed": sum(f.problems_not_listed for f in report.files.values()),
        "token_stats": stats.to_json() if stats is not None else None,
        "token_stats_skipped": skipped or None,
        "training_refusal": training_refusal(report.format),
        "objectives": list(objectives_for(report.format)),
    }


def _print_check(report: DatasetReport, stats: TokenStats | None, skipped: str) -> None:
    for problem in report.problems:
        print(problem)
    for file in report.files.values():
        if file.problems_not_listed:
            # The listed ones are the first at a line, then every whole-file finding.
            print(f"{file.path}: ... and {file.problems_not_listed} more problems (the first "
                  f"{MAX_PROBLEMS_LISTED} at a line are listed)")
    if Path(report.path).is_file():
        rows = f"{sum(report.rows.values())} rows"
    else:
        rows = ", ".join(f"{split} {count} rows" for split, count in report.rows.items())
    print(f"{report.path}: {report.format or 'unknown format'}" + (f"; {rows}" if rows else ""))
    if stats is not None:
        _print_token_stats(stats)
    elif skipped:
        print(f"token statistics skipped: {skipped}")
    errors, warnings = report.errors, report.warnings
    verdict = "valid" if report.ok else "not valid"
    print(f"{verdict}: {errors} error{'s' * (errors != 1)}, "
          f"{warnings} warning{'s' * (warnings != 1)}")
    objectives = objectives_for(report.format)
    if objectives and "sft" not in objectives:  # say so where a run needs --objective
        print(f"trains the objectives {' and '.join(objectives)} (`runs new --objective`), "
              "not sft")


def _print_token_stats(stats: TokenStats) -> None:
    print(f"tokens per row with {stats.model} (max_seq_length {stats.max_seq_length}):")
    print_table(
        ["  SPLIT", "ROWS", "MIN", "MEDIAN", "P95", "MAX", "TRUNCATED"],
        [[f"  {split}", s.rows, s.min, s.median, s.p95, s.max, s.truncated_rows]
         for split, s in stats.splits.items()],
    )
    if stats.note:
        print(f"  ({stats.note})")
    preview = stats.preview
    if preview is not None:
        print(f"{preview.split}.jsonl:{preview.line} as mask_prompt trains it "
              f"({preview.tokens} tokens):")
        for span in preview.spans:
            text = span.text.replace("\n", "\\n")
            print(f"  {span.kind:<9} {span.tokens:>4} | {text}")


def cmd_list(args) -> int:
    datasets = discover_datasets()
    if args.json:
        print_json({"schema_version": SCHEMA_VERSION,
                    "datasets": [d.to_json() for d in datasets]})
        return EXIT_OK
    print_table(
        ["NAME", "FORMAT", "TRAIN", "VALID", "TEST", "SOURCE", "PATH"],
        [[d.name, d.format or "?",
          *[fmt_bytes(d.split_bytes[s]) if s in d.split_bytes else "-"
            for s in ("train", "valid", "test")],
          d.source, d.path] for d in datasets],
    )
    return EXIT_OK


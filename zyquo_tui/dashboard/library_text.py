"""How the dashboard describes a model and a dataset: labels, a line of facts, a validation
summary and the first problems with file:line (the setup, models and datasets screens)."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from zyquo_tui.core.formatting import basename, fmt_bytes
from zyquo_tui.core.library.datasets import DatasetInfo, DatasetReport
from zyquo_tui.core.library.models import ModelInfo
from zyquo_tui.core.library.rows import chat_pair_prefix, training_refusal


def parameters_text(count: int | None) -> str:
    if count is None:
        return "? params"
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.3g}{unit} params"
    return f"{count} params"


def model_label(info: ModelInfo) -> str:
    quant = f" · {info.quantization.bits}-bit" if info.quantization else ""
    return f"{info.name}{quant}"


def model_facts_line(info: ModelInfo) -> str:
    parts = [info.architecture or "unknown architecture", parameters_text(info.parameters)]
    if info.weight_bytes is not None:
        parts.append(fmt_bytes(info.weight_bytes))
    if info.quantization:
        group = f" g{info.quantization.group_size}" if info.quantization.group_size else ""
        parts.append(f"{info.quantization.bits}-bit{group}")
    else:
        dtypes = sorted(info.weight_dtypes, key=info.weight_dtypes.get, reverse=True)
        parts.append(dtypes[0].lower() if dtypes else "unquantized")
    if info.num_layers:
        parts.append(f"{info.num_layers} layers")
    parts.append("chat template" if info.chat_template else "no chat template")
    return " · ".join(parts)


def dataset_label(info: DatasetInfo) -> str:
    return f"{info.name} ({info.format or 'unknown format'})"


def problem_where(problem) -> str:
    where = basename(problem.file)
    where = f"{where}:{problem.line}" if problem.line is not None else where
    if getattr(problem, "source", None):  # a converted row: the row it came from, by its file's name
        where += f" (from {basename(problem.source)})"
    return where


def dataset_summary(report: DatasetReport) -> Text:
    """`chat · train 225 · valid 40 · test 40 rows · ✓ valid` (or its errors), and why
    training refuses rows of its format, if it does."""
    text = Text(report.format or "unknown format")
    rows = report.rows
    if rows:
        text.append(" · " + " · ".join(f"{split} {count}" for split, count in rows.items())
                    + " rows")
    if report.errors:
        text.append(f" · ✗ {report.errors} error{'s' if report.errors != 1 else ''}",
                    style="bold red")
    else:
        text.append(" · ✓ valid", style="green")
    if report.warnings:
        text.append(f" · {report.warnings} warning{'s' if report.warnings != 1 else ''}",
                    style="yellow")
    refusal = training_refusal(report.format)
    if refusal:
        text.append(f"\n✗ {refusal}.", style="bold red")
    return text


def dataset_problems(report: DatasetReport, limit: int = 6, more_hint: str = "") -> Text:
    """The first problems as `train.jsonl:3: message`, errors first."""
    problems = sorted(report.problems, key=lambda p: p.severity != "error")
    text = Text()
    for index, problem in enumerate(problems[:limit]):
        if index:
            text.append("\n")
        style = "red" if problem.severity == "error" else "yellow"
        text.append(problem_where(problem), style=f"bold {style}")
        text.append(f": {problem.message}", style=style)
    more = len(problems) - limit + sum(f.problems_not_listed for f in report.files.values())
    if more > 0:
        text.append(f"\n… and {more} more{more_hint}", style="dim")
    return text


def _message_text(messages: list) -> str:
    """Chat messages as lines `role: content` (the content alone for a single answer)."""
    parts = [m for m in messages if isinstance(m, dict)]
    if len(parts) == 1:
        return str(parts[0].get("content", ""))
    return "\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in parts)


def preference_pair(row: dict) -> tuple[str, str, str] | None:
    """A preference row as (prompt, chosen, rejected) text: the prompt field, or for a chat
    pair the messages both sides share; None when the row is no pair."""
    chosen, rejected = row.get("chosen"), row.get("rejected")
    if isinstance(chosen, list) and isinstance(rejected, list):
        shared = chat_pair_prefix(chosen, rejected)
        return (_message_text(chosen[:shared]), _message_text(chosen[shared:]),
                _message_text(rejected[shared:]))
    if chosen is None or rejected is None:
        return None
    return str(row.get("prompt", "")), str(chosen), str(rejected)


def pair_preview(row: dict, where: str) -> Group | Text:
    """A preference pair side by side: the prompt across, then chosen and rejected in two
    columns, so the difference reads at a glance."""
    pair = preference_pair(row)
    if pair is None:
        return Text(f"{where}: not a preference pair.", style="dim")
    prompt, chosen, rejected = pair
    heading = Text(f"{where}  ", style="bold")
    heading.append("([ ] other pairs)", style="dim")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False, expand=True)
    table.add_column("chosen", style="green", ratio=1)
    table.add_column("rejected", style="red", ratio=1)
    table.add_row(chosen, rejected)
    return Group(heading, Text("prompt  ", style="dim") + Text(prompt or "(none)"), table)

"""The rows an evaluation reads (`zyquo-tui eval`, a run's `--eval-data`): each a prompt with
its reference answer, read from a .jsonl file with the problems of a row named at file:line.

Three formats have a reference answer:
- completions `{"prompt", "completion"}`: the completion;
- chat `{"messages"}`: the last turn, which must be the assistant's; the turns before it are the
  prompt;
- prompts with answers `{"prompt" | "messages", "answer"}` (sample_data/rl): the answer.
Text and preference rows have none, and are refused.

Pure Python (core/): the CLI reads the file before it starts the evaluator, so a bad row is
refused at once (exit 2), and the evaluator reads it again the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.library.dataset_files import validate_file
from zyquo_tui.core.library.rows import (
    BOM,
    CHAT,
    COMPLETIONS,
    ERROR,
    PROMPTS,
    TOOLS,
    row_format,
)

# The longest greedy answer an evaluation generates, in tokens, unless told otherwise.
DEFAULT_EVAL_MAX_TOKENS = 64


@dataclass(frozen=True)
class EvalRow:
    """One row to evaluate: the prompt as generation takes it (a string is one user turn),
    the reference answer, and the prompt's text as reward functions receive it."""

    line: int
    prompt: str | list[dict[str, Any]]
    reference: str
    prompt_text: str
    type: Any = None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return _content_text(users[-1].get("content")) if users else ""


def _eval_row(where: str, line: int, row: dict[str, Any]) -> EvalRow:
    found = row_format(row)
    if found == COMPLETIONS:
        return EvalRow(line, row["prompt"], row["completion"], row["prompt"])
    if found == PROMPTS:
        prompt = row["prompt"] if "prompt" in row else row["messages"]
        text = str(prompt) if "prompt" in row else _last_user_text(row["messages"])
        return EvalRow(line, prompt, str(row["answer"]), text, row.get("type"))
    if found in (CHAT, TOOLS):
        messages = row["messages"]
        last = messages[-1] if messages else None
        if not isinstance(last, dict) or last.get("role") != "assistant" \
                or not isinstance(last.get("content"), str) or len(messages) < 2:
            raise UserError(f"{where}:{line}: a chat row to evaluate must end with the "
                            "assistant's answer after at least one turn before it (the "
                            "prompt); fix the row or leave it out.")
        prompt = messages[:-1]
        return EvalRow(line, prompt, last["content"], _last_user_text(prompt), row.get("type"))
    kind = found or "unknown"
    raise UserError(f"{where}:{line}: a {kind} row has no reference answer to evaluate "
                    "against; give completions {\"prompt\", \"completion\"}, chat "
                    "{\"messages\"} or {\"prompt\", \"answer\"} rows.")


def read_eval_rows(path: Path | str, limit: int | None = None) -> list[EvalRow]:
    """The file's rows to evaluate, the first `limit` of them when given. UserError (exit 2)
    naming file:line for a file that cannot be read or a row that cannot be evaluated."""
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise UserError(f"{where} is not a file; give a .jsonl file of rows to evaluate.")
    report = validate_file(path)
    errors = [p for p in report.problems if p.severity == ERROR]
    if errors:
        raise UserError(f"{errors[0]}; fix that row of the evaluation data.")
    rows: list[EvalRow] = []
    with open(path, "rb") as file:
        for line, raw in enumerate(file, start=1):
            if limit is not None and len(rows) >= limit:
                break
            content = raw.removeprefix(BOM).strip() if line == 1 else raw.strip()
            if content:
                rows.append(_eval_row(where, line, json.loads(content)))
    if not rows:
        raise UserError(f"{where} has no rows to evaluate; add some.")
    return rows

"""Dataset rows: the formats mlx-lm reads (decided from the first row) and the checks of a
single row, each problem one sentence."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # a type only: dataset_files imports this module
    from zyquo_tui.core.library.dataset_files import FileReport


ERROR = "error"
WARNING = "warning"
Severity = Literal["error", "warning"]
COMPLETIONS = "completions"
CHAT = "chat"
TOOLS = "tools"
TEXT = "text"
PREFERENCE = "preference"
# Prompts with the answer a reward checks (mlx-lm-lora's GRPO rows): a `prompt`, or chat
# `messages` ending in a user turn, and an `answer`.
PROMPTS = "prompts"
FORMATS = (COMPLETIONS, CHAT, TOOLS, TEXT, PREFERENCE, PROMPTS)


def objectives_for(data_format: str | None) -> tuple[str, ...]:
    """The objectives rows of this format train: preference pairs dpo and orpo, prompts with
    answers grpo, the other formats sft and distill (a teacher's distribution over the same
    responses)."""
    if data_format is None:
        return ()
    if data_format == PREFERENCE:
        return ("dpo", "orpo")
    if data_format == PROMPTS:
        return ("grpo",)
    return ("sft", "distill")


def training_refusal(data_format: str | None, objective: str | None = None) -> str | None:
    """Why a run of `objective` cannot train rows of this format; None when it can. Without
    an objective: None when some objective trains them.

    One place for the trainer, `runs new`, the setup form and `data check`.
    """
    if data_format is None:
        return None
    trains = objectives_for(data_format)
    if objective is None or objective in trains:
        return None
    if data_format == PREFERENCE:
        return (f"preference rows (prompt, chosen, rejected) train the dpo or orpo objective, "
                f"not {objective}; choose --objective dpo or orpo")
    if data_format == PROMPTS:
        return (f"prompt rows with an answer (prompt, answer) train the grpo objective, not "
                f"{objective}; choose --objective grpo, or pick a dataset of responses")
    if objective == "grpo":
        return (f"the grpo objective needs prompt rows with the answer a reward checks (prompt "
                f"and answer, or messages ending in a user turn and answer), and these are "
                f"{data_format} rows; add an answer to each row, or train them with "
                f"{' or '.join(objectives_for(data_format))}")
    return (f"the {objective} objective needs preference rows (prompt, chosen, rejected), and "
            f"these are {data_format} rows; train them with the sft objective, or pick a "
            "preference dataset")


def feature_keys(extra_config: dict[str, Any]) -> dict[str, Any]:
    """A run's *_feature settings (prompt_feature, chat_feature...): the row keys mlx-lm's
    create_dataset reads instead of its default ones."""
    return {key: value for key, value in extra_config.items() if key.endswith("_feature")}


KNOWN_ROLES = ("system", "user", "assistant", "tool")

# The keys each format needs, for saying which one a row lacks.
REQUIRED_KEYS = {
    COMPLETIONS: ("prompt", "completion"),
    CHAT: ("messages",),
    TOOLS: ("messages",),
    TEXT: ("text",),
    PREFERENCE: ("chosen", "rejected"),  # and a prompt, unless both are chat messages
    PROMPTS: ("answer",),  # and a prompt, or messages ending in a user turn
}

BOM = b"\xef\xbb\xbf"
DECODE_JSON = json.JSONDecoder().decode


@dataclass(frozen=True)
class DatasetProblem:
    """One thing wrong with a dataset, where it is, and whether it stops a run (error)."""

    file: str
    line: int | None
    message: str
    severity: Severity = ERROR
    # Where a converted row came from (`data convert`'s record: FILE:LINE or FILE:row N).
    source: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        if self.source:
            where += f" (from {self.source})"
        prefix = "warning: " if self.severity == WARNING else ""
        return f"{where}: {prefix}{self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "message": self.message,
                "severity": self.severity, "source": self.source}


def row_format(row: dict[str, Any]) -> str | None:
    """The format of one row, by mlx-lm's precedence (completions, then chat, then text); a
    row with an answer and no response is a prompt for a reward to judge."""
    if "answer" in row and ("prompt" in row or "messages" in row) \
            and not ("completion" in row or "chosen" in row):
        return PROMPTS
    if "prompt" in row and "completion" in row:
        return COMPLETIONS
    if "messages" in row:
        return TOOLS if "tools" in row else CHAT
    if "text" in row:
        return TEXT
    if "chosen" in row and "rejected" in row:  # with a prompt, or a chat pair
        return PREFERENCE
    return None


def format_family(row_format_name: str | None) -> str | None:
    # Chat rows with and without tools load into the same mlx-lm ChatDataset.
    return CHAT if row_format_name == TOOLS else row_format_name


def peek_format(path: Path) -> str | None:
    """The format of a file's first row, or None if it has no readable first row."""
    try:
        with open(path, "rb") as file:
            first = file.readline(1 << 24)
        row = DECODE_JSON(first.removeprefix(BOM).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return row_format(row) if isinstance(row, dict) else None


def json_error_message(line_number: int, text: str, error: json.JSONDecodeError) -> str:
    stripped = text.strip()
    if stripped == "[" and line_number == 1:
        return ("the file is one JSON array, not JSON Lines: write one JSON object per line "
                "with no enclosing [ ]")
    if stripped in ("{", "}", "},", "]"):
        return ("a row spread over several lines: JSON Lines needs each object on one line")
    return f"invalid JSON at column {error.colno}: {error.msg}"


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def not_an_object_message(row: object) -> str:
    if isinstance(row, list):
        return ("a JSON array where a row should be: each line must be one JSON object "
                "such as {\"text\": ...}")
    return f"a JSON {_json_type(row)} where a row should be: each line must be one JSON object"


class RowChecker:
    """Checks rows one by one against the format of the file's first row (as mlx-lm does)."""

    def __init__(self, report: FileReport, file_format: str | None = None,
                 format_line: int | None = None) -> None:
        # A worker checking a later chunk of a file is told the format of its first row.
        self.report = report
        # The module's own string, so the hot path can compare by identity.
        self.file_format = next((f for f in FORMATS if f == file_format), None)
        self.format_line = format_line

    def __call__(self, line: int, row: dict[str, Any]) -> None:
        found = row_format(row)
        if found is None:
            self._missing_keys(line, row, self.file_format)
            return
        if found is not self.file_format:
            if self.file_format is None:
                self.file_format, self.format_line = found, line
            elif format_family(found) != format_family(self.file_format):
                self.report.add(line, f"mixed formats: a {found} row in a {self.file_format} "
                                      f"file (the format comes from line {self.format_line}); "
                                      "mlx-lm reads every row as the first one's format")
                return
            elif found == TOOLS:
                self.file_format = TOOLS
        findings = _CHECKS[found](row)
        if findings:
            for severity, message in findings:
                self.report.add(line, message, severity)

    def _missing_keys(self, line: int, row: dict[str, Any], expected: str | None) -> None:
        keys = ", ".join(sorted(row)) or "none"
        if expected is None:
            self.report.add(line, f"no known format (keys: {keys}): a row needs prompt and "
                                  "completion, messages, text, or prompt, chosen and rejected")
            return
        missing = [k for k in REQUIRED_KEYS[expected] if k not in row]
        self.report.add(line, f"missing {', '.join(repr(k) for k in missing)} for a {expected} "
                              f"row (keys: {keys})")


_Findings = list[tuple[Severity, str]] | None


def _check_string(findings: list, row: dict[str, Any], key: str, empty: Severity) -> None:
    value = row[key]
    if type(value) is not str:
        findings.append((ERROR, f"{key!r} must be a string, found {_json_type(value)}"))
    elif not value.strip():
        findings.append((empty, f"{key!r} is empty"))


def _check_completions(row: dict[str, Any]) -> _Findings:
    prompt, completion = row["prompt"], row["completion"]
    if type(prompt) is str and type(completion) is str and prompt.strip() and \
            completion.strip() and "tools" not in row:
        return None
    findings: list[tuple[Severity, str]] = []
    _check_string(findings, row, "prompt", WARNING)
    _check_string(findings, row, "completion", ERROR)
    _check_tools(findings, row)
    return findings


def _check_text(row: dict[str, Any]) -> _Findings:
    text = row["text"]
    if type(text) is str and text.strip():
        return None
    findings: list[tuple[Severity, str]] = []
    _check_string(findings, row, "text", ERROR)
    return findings


def _check_preference(row: dict[str, Any]) -> _Findings:
    # A pair is a prompt with two answers (each a string, or the conversational form preference
    # trainers also read: a list of messages), or a chat pair: two conversations that share
    # their prompt turns and differ in the answer.
    findings: list[tuple[Severity, str]] = []
    sides = ("chosen", "rejected")
    keys = (("prompt", WARNING),) if "prompt" in row else ()
    for key, empty in (*keys, ("chosen", ERROR), ("rejected", ERROR)):
        value = row[key]
        if type(value) is not list:
            _check_string(findings, row, key, empty)
        elif not value:
            findings.append((empty, f"{key!r} is empty"))
        else:
            for index, message in enumerate(value):
                role = message.get("role") if type(message) is dict else None
                problem = (f"unknown role {role!r}" if role not in KNOWN_ROLES
                           else _content_problem(message, role))
                if problem:
                    findings.append((ERROR, f"{key}[{index}]: {problem}"))
    if "prompt" not in row and not findings:
        if not all(type(row[side]) is list for side in sides):
            findings.append((ERROR, "'prompt' is missing: a pair of answers needs the prompt "
                                    "they answer (or give chosen and rejected as two chat "
                                    "conversations that share their prompt turns)"))
        else:
            shared = chat_pair_prefix(row["chosen"], row["rejected"])
            if shared == 0:
                findings.append((ERROR, "'chosen' and 'rejected' do not share their prompt "
                                        "turns (they differ from the first message); a chat "
                                        "pair is one conversation with two different answers"))
            elif shared in (len(row["chosen"]), len(row["rejected"])):
                findings.append((ERROR, f"one side of the chat pair has no answer after the "
                                        f"{shared} shared messages"))
    if row["chosen"] == row["rejected"]:
        findings.append((WARNING, "'chosen' and 'rejected' are the same: the pair teaches "
                                  "nothing"))
    return findings or None


def chat_pair_prefix(chosen: list, rejected: list) -> int:
    """How many leading messages two conversations share (a chat pair's prompt turns)."""
    shared = 0
    for a, b in zip(chosen, rejected):
        if a != b:
            break
        shared += 1
    return shared


def _check_tools(findings: list, row: dict[str, Any]) -> None:
    tools = row.get("tools")
    if tools is None:
        return
    if type(tools) is not list or not all(type(t) is dict for t in tools):
        findings.append((ERROR, f"'tools' must be an array of objects, found "
                                f"{_json_type(tools)}"))


def _check_chat(row: dict[str, Any]) -> _Findings:
    messages = row["messages"]
    if type(messages) is not list:
        return [(ERROR, f"'messages' must be an array of messages, found "
                        f"{_json_type(messages)}")]
    if "tools" not in row and _is_flawless(messages):
        return None
    findings = _message_problems(messages, "messages")
    if "tools" in row:
        findings = findings or []
        _check_tools(findings, row)
    return findings or None


def _check_prompts(row: dict[str, Any]) -> _Findings:
    findings: list[tuple[Severity, str]] = []
    if "messages" in row and "prompt" not in row:
        messages = row["messages"]
        if type(messages) is not list or not messages:
            findings.append((ERROR, f"'messages' must be a non-empty array of messages, found "
                                    f"{_json_type(messages)}"))
        else:
            # The conversation so far: the answer is the model's to give, so no assistant
            # turn is needed after the last user turn.
            findings += [finding for finding in _message_problems(messages, "messages")
                         if "no assistant message" not in finding[1]
                         and "ends with a" not in finding[1]]
            last = messages[-1]
            if type(last) is dict and last.get("role") != "user":
                findings.append((ERROR, "'messages' must end in a user turn: the model "
                                        "answers it, and the reward judges that answer"))
    else:
        _check_string(findings, row, "prompt", ERROR)
    answer = row["answer"]
    if type(answer) not in (str, int, float) or type(answer) is bool:
        findings.append((ERROR, f"'answer' must be a string or a number, found "
                                f"{_json_type(answer)}"))
    return findings or None


_CHECKS = {COMPLETIONS: _check_completions, CHAT: _check_chat, TOOLS: _check_chat,
           TEXT: _check_text, PREFERENCE: _check_preference, PROMPTS: _check_prompts}

# (previous role, role) pairs of a well-ordered conversation; None is its start.
_GOOD_TURNS = frozenset({
    (None, "system"), (None, "user"), ("system", "user"), ("user", "assistant"),
    ("assistant", "user"), ("assistant", "tool"), ("tool", "tool"), ("tool", "assistant"),
    ("tool", "user"),
})


def _is_flawless(messages: list, _good_turns: frozenset = _GOOD_TURNS) -> bool:
    """A quick yes for the common conversation with nothing to report.

    Most rows are fine, and the detailed check below costs several times more; a False here
    only means "look closer", never that something is wrong.
    """
    try:
        previous = None
        for message in messages:
            content = message["content"]
            if type(content) is not str or not content or content.isspace():
                return False
            role = message["role"]
            if (previous, role) not in _good_turns:
                return False
            previous = role
        return previous == "assistant"
    except (KeyError, TypeError):  # a message that is not an object, or lacks a key
        return False


def _message_problems(messages: list, key: str) -> list[tuple[Severity, str]]:
    """Problems of one conversation: message shape, known roles, their order, empty turns.

    The order rules are those the strict chat templates (Llama 2, Mistral, Gemma) enforce by
    raising: system first, then user and assistant taking turns, tool results after an
    assistant turn; and a conversation needs an assistant turn to learn from.
    """
    findings: list[tuple[Severity, str]] = []
    if not messages:
        return [(ERROR, f"{key!r} is empty")]
    if type(messages[0]) is dict and "role" not in messages[0] and "from" in messages[0]:
        return [(ERROR, f"{key!r} uses 'from'/'value' (ShareGPT style): mlx-lm needs 'role' "
                        "and 'content' in each message")]
    previous = None  # the role of the previous message
    order_known = True  # after a message of unknown role, order checks would only echo it
    assistant_seen = False
    for index, message in enumerate(messages):
        where = f"{key}[{index}]"
        if type(message) is not dict:
            findings.append((ERROR, f"{where} must be an object with role and content, found "
                                    f"{_json_type(message)}"))
            order_known = False
            continue
        role = message.get("role")
        if role not in KNOWN_ROLES:
            if role is None:
                findings.append((ERROR, f"{where} has no 'role'"))
            else:
                findings.append((ERROR, f"{where}: unknown role {role!r}; use one of "
                                        f"{', '.join(KNOWN_ROLES)}"))
            order_known = False
            continue
        order = _order_problem(role, previous, index) if order_known else None
        if order:
            findings.append((ERROR, f"{where}: {order}"))
        if not (role == "system" and index > 0):  # a misplaced system turn changes no turn
            previous = role
        if role == "assistant":
            assistant_seen = True
        content_problem = _content_problem(message, role)
        if content_problem:
            findings.append((WARNING if role == "system" else ERROR,
                             f"{where} ({role}): {content_problem}"))
    last = messages[-1].get("role") if type(messages[-1]) is dict else None
    if not assistant_seen and order_known:
        findings.append((ERROR, f"{key!r} has no assistant message: nothing to learn from"))
    elif assistant_seen and last in KNOWN_ROLES and last != "assistant":
        findings.append((WARNING, f"{key!r} ends with a {last} message: with mask_prompt "
                                  "that turn is what gets trained"))
    return findings


def _order_problem(role: str, previous: str | None, index: int) -> str | None:
    if role == "system":
        return None if index == 0 else "a system message must come first"
    if role == "tool":
        if previous in ("assistant", "tool"):
            return None
        return "a tool message must follow an assistant message that called the tool"
    if previous is None or previous == "system":
        if role == "user":
            return None
        return f"the conversation must open with a user message, not {role}"
    if role == previous:
        return f"two {role} messages in a row: user and assistant must take turns"
    return None


def _content_problem(message: dict[str, Any], role: str) -> str | None:
    content = message.get("content")
    if type(content) is str:
        if content.strip():
            return None
        if role == "assistant" and message.get("tool_calls"):
            return None
        return "empty content"
    if content is None:
        if role == "assistant" and message.get("tool_calls"):
            return None
        return "no content" if "content" not in message else "content is null"
    if type(content) is list:
        # Multi-part content ({"type": "text", "text": ...}) that templates may render.
        if not content:
            return "empty content"
        if all(type(part) is dict and "type" in part for part in content):
            return None
        return "content parts must be objects with a 'type'"
    return f"content must be a string, found {_json_type(content)}"

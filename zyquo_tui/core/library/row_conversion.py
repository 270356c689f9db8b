"""Rows as other tools write them, turned into rows mlx-lm reads: ShareGPT conversations,
Alpaca instructions, a prompt and a completion under other names, and rows that already are
mlx-lm's (kept, or moved between chat and completions when asked).

Each conversion of a row either returns the new row or raises RowNotConverted with one
sentence; the caller adds where the row came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zyquo_tui.core.library.rows import CHAT, COMPLETIONS, row_format

SHAREGPT = "ShareGPT"
ALPACA = "Alpaca"
FEATURES = "renamed columns"
MLX_LM = "mlx-lm"
TARGET_FORMATS = (CHAT, COMPLETIONS)

# ShareGPT's speakers (`from`) as chat roles; the names seen in the datasets people share.
SHAREGPT_ROLES = {
    "system": "system",
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
    "bing": "assistant", "model": "assistant", "function_call": "assistant",
    "tool": "tool", "function_response": "tool", "observation": "tool",
}


class RowNotConverted(ValueError):
    """A row that cannot be converted; the message says why and what to do."""


@dataclass(frozen=True)
class RowShape:
    """How a source's rows are written (SHAREGPT, ALPACA, FEATURES or MLX_LM) and the format
    they convert to when none is asked for."""

    kind: str
    default_format: str | None  # None: an mlx-lm row keeps its own format


def sharegpt_turns(row: dict[str, Any]) -> list | None:
    """The ShareGPT conversation of a row (`conversations`, or `messages` written with
    `from`/`value`), or None when the row is not ShareGPT."""
    for key in ("conversations", "messages"):
        turns = row.get(key)
        if isinstance(turns, list) and turns and isinstance(turns[0], dict) \
                and "from" in turns[0] and "role" not in turns[0]:
            return turns
    return None


def row_shape(row: dict[str, Any], prompt_feature: str | None = None,
              completion_feature: str | None = None) -> RowShape | None:
    """How a row is written, or None when it is none of the shapes this module converts."""
    if prompt_feature or completion_feature:
        return RowShape(FEATURES, COMPLETIONS)
    if sharegpt_turns(row) is not None:
        return RowShape(SHAREGPT, CHAT)
    if "conversations" in row and "messages" not in row:
        return RowShape(SHAREGPT, CHAT)  # role/content under ShareGPT's key
    if row_format(row) is not None:
        return RowShape(MLX_LM, None)
    if "instruction" in row and "output" in row:
        return RowShape(ALPACA, COMPLETIONS)
    return None


def unknown_shape_message(row: dict[str, Any]) -> str:
    keys = ", ".join(sorted(row)) or "none"
    return (f"no known row shape (keys: {keys}): give --prompt-feature and "
            "--completion-feature to name the prompt and answer columns")


def convert_row(row: dict[str, Any], shape: RowShape, target: str | None,
                prompt_feature: str | None = None,
                completion_feature: str | None = None) -> dict[str, Any]:
    """The mlx-lm row for `row`, written as `shape` says, in `target` format (CHAT or
    COMPLETIONS; None: the shape's default)."""
    target = target or shape.default_format
    if shape.kind == MLX_LM:
        found = row_format(row)
        if found is None:
            raise RowNotConverted(f"not an mlx-lm row like the first one (keys: "
                                  f"{', '.join(sorted(row)) or 'none'})")
        if target is None or found == target or (found == "tools" and target == CHAT):
            return row
        if found == COMPLETIONS and target == CHAT:
            return _as_target(_completion_messages(row["prompt"], row["completion"]), CHAT)
        if found in (CHAT, "tools") and target == COMPLETIONS:
            return _as_target(_role_messages(row["messages"]), COMPLETIONS)
        raise RowNotConverted(f"{found} rows cannot become {target} rows; leave out --format "
                              "to keep them as they are")
    if shape.kind == SHAREGPT:
        messages = _sharegpt_messages(row)
    elif shape.kind == ALPACA:
        messages = _alpaca_messages(row)
    else:
        messages = _feature_messages(row, prompt_feature or "prompt",
                                     completion_feature or "completion")
    system = row.get("system")
    if shape.kind != SHAREGPT and isinstance(system, str) and system.strip():
        messages.insert(0, {"role": "system", "content": system})
    return _as_target(messages, target)


def _text(row: dict[str, Any], key: str, *, required: bool = True) -> str:
    if key not in row or row[key] is None:
        if required:
            keys = ", ".join(sorted(row)) or "none"
            raise RowNotConverted(f"no {key!r} (keys: {keys})")
        return ""
    value = row[key]
    if not isinstance(value, str):
        raise RowNotConverted(f"{key!r} must be text, found {type(value).__name__}")
    return value


def _sharegpt_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    turns = row.get("conversations", row.get("messages"))
    if not isinstance(turns, list) or not turns:
        raise RowNotConverted("'conversations' must be a non-empty list of turns")
    if sharegpt_turns(row) is None:  # role/content already, under ShareGPT's key
        return _role_messages(turns)
    messages = []
    system = row.get("system")
    if isinstance(system, str) and system.strip():
        messages.append({"role": "system", "content": system})
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
            raise RowNotConverted(f"conversations[{index}] needs 'from' and 'value'")
        speaker = turn["from"]
        role = SHAREGPT_ROLES.get(str(speaker).lower())
        if role is None:
            raise RowNotConverted(f"conversations[{index}]: unknown speaker {speaker!r}; "
                                  f"ShareGPT's are {', '.join(sorted(SHAREGPT_ROLES))}")
        if not isinstance(turn["value"], str):
            raise RowNotConverted(f"conversations[{index}]: 'value' must be text")
        messages.append({"role": role, "content": turn["value"]})
    return messages


def _role_messages(messages: Any) -> list[dict[str, str]]:
    if not isinstance(messages, list):
        raise RowNotConverted("the conversation must be a list of messages")
    return [dict(message) for message in messages]


def _alpaca_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    instruction = _text(row, "instruction")
    extra = _text(row, "input", required=False)
    # Alpaca's own prompt puts the input after the instruction, in a block of its own.
    prompt = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    return _completion_messages(prompt, _text(row, "output"))


def _feature_messages(row: dict[str, Any], prompt_key: str,
                      completion_key: str) -> list[dict[str, str]]:
    return _completion_messages(_text(row, prompt_key), _text(row, completion_key))


def _completion_messages(prompt: str, completion: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]


def _as_target(messages: list[dict[str, Any]], target: str) -> dict[str, Any]:
    if target == CHAT:
        return {"messages": messages}
    roles = [message.get("role") for message in messages]
    if roles == ["system", "user", "assistant"]:
        raise RowNotConverted("a system message has no place in a completions row; use "
                              "--format chat to keep it")
    if roles != ["user", "assistant"]:
        raise RowNotConverted(f"a conversation of {len(messages)} turns is not one prompt "
                              "and one answer; use --format chat")
    return {"prompt": messages[0]["content"], "completion": messages[1]["content"]}

"""Sample answers while training (`--sample-prompts`): at each validation, the model as it is
then answers a few prompts, so the user sees the answers change as it learns.

Prompts come from a file (one a line) or from the first N rows of the run's valid.jsonl (a
completion's prompt, a chat's messages before its last answer, the first half of a text row).
Generation is the client's and `runs try`'s (trainer/sampling.py, mlx-lm's own), greedy,
through the tokenizer's chat template when it has one. Greedy decoding draws no random numbers,
and the model is put in eval mode meanwhile (no dropout), so sampling changes neither the
training's RNG state nor its losses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zyquo_tui.trainer.encoding import has_chat_template, prompt_tokens
from zyquo_tui.trainer.trainer_failure import fail


@dataclass
class SamplePrompt:
    """What the user reads as the prompt (`shown`), and what the model is given."""

    shown: str
    messages: list[dict[str, Any]] = field(default_factory=list)  # for a chat template
    text: str = ""  # for a model without one


def prompts_from_file(path: Path) -> list[SamplePrompt]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise fail("config", f"sample_prompts: {path} cannot be read ({error}).",
                   "give a text file of prompts, one a line") from None
    prompts = [SamplePrompt(line.strip(), [{"role": "user", "content": line.strip()}],
                            line.strip()) for line in lines if line.strip()]
    if not prompts:
        raise fail("config", f"sample_prompts: {path} has no prompts.",
                   "write one prompt a line in the file")
    return prompts


def prompt_from_row(row: Any) -> SamplePrompt | None:
    """The prompt of one validation row, in any of mlx-lm's formats; None for another shape."""
    if not isinstance(row, dict):
        return None
    if isinstance(row.get("prompt"), str):
        text = row["prompt"]
        return SamplePrompt(text, [{"role": "user", "content": text}], text)
    messages = row.get("messages")
    if isinstance(messages, list) and messages:
        asked = messages[:-1] if messages[-1].get("role") == "assistant" else messages
        users = [m for m in asked if isinstance(m, dict) and m.get("role") == "user"]
        if not asked or not users:
            return None
        shown = str(users[-1].get("content", ""))
        return SamplePrompt(shown, list(asked), shown)
    if isinstance(row.get("text"), str):
        words = row["text"].split()
        text = " ".join(words[:max(1, len(words) // 2)])
        return SamplePrompt(text, [], text)  # a text row has no turns: given as it is
    return None


def prompts_from_validation(valid: Path, count: int) -> list[SamplePrompt]:
    prompts: list[SamplePrompt] = []
    try:
        with open(valid, encoding="utf-8") as handle:
            for line in handle:
                if len(prompts) >= count:
                    break
                try:
                    prompt = prompt_from_row(json.loads(line))
                except json.JSONDecodeError:
                    continue
                if prompt is not None:
                    prompts.append(prompt)
    except FileNotFoundError:
        return []
    return prompts


def sample_prompts(setting: int | str, data: Path) -> list[SamplePrompt]:
    """The run's prompts: from a file, or the first `setting` validation rows."""
    if isinstance(setting, int):
        return prompts_from_validation(Path(data) / "valid.jsonl", setting)
    return prompts_from_file(Path(setting))


class Sampler:
    """Generates the answers to the run's prompts with the model's current weights."""

    def __init__(self, model, tokenizer, prompts: list[SamplePrompt], max_tokens: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.max_tokens = max_tokens
        self.chat = has_chat_template(tokenizer)

    def _tokens(self, prompt: SamplePrompt) -> list[int]:
        # The turns through the template; else the text: a text row's beginning, to be
        # continued, or a prompt's words for a model without a template.
        if self.chat and prompt.messages:
            return prompt_tokens(self.tokenizer, prompt.messages)
        return prompt_tokens(self.tokenizer, prompt.text, chat=False)

    def answers(self) -> list[tuple[str, str]]:
        """(prompt shown, answer) for each prompt."""
        from zyquo_tui.trainer.sampling import complete

        was_training = self.model.training
        self.model.eval()
        try:
            return [(prompt.shown, complete(self.model, self.tokenizer, self._tokens(prompt),
                                            self.max_tokens).text)
                    for prompt in self.prompts]
        finally:
            if was_training:
                self.model.train()

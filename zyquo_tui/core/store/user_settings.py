"""User settings from $ZYQUO_HOME/config.toml: model folders, notifications, cancel grace.

One run trains at a time on a machine, always: runs share the unified memory the memory
verdict was made for, so a second one would invalidate it. More runs wait in the queue.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.atomic import write_atomic
from zyquo_tui.core.store.paths import settings_file


def toml_error_line(error: tomllib.TOMLDecodeError, text: str) -> int:
    """The line of a TOML error (Python 3.11's tomllib gives it only inside the message)."""
    match = re.search(r"at line (\d+)", str(error))
    return int(match.group(1)) if match else max(1, len(text.splitlines()))


@dataclass
class Settings:
    """What a user can set in config.toml. Missing keys take these defaults."""

    model_folders: list[str] = field(default_factory=list)
    webhook_url: str | None = None
    cancel_grace_seconds: float = 30.0
    # A train loss that diverges always raises a warning; this decides whether it also
    # stops the run ([runs] stop_on_divergence; core/runs/stopping.py has the rule).
    stop_on_divergence: bool = False

    @classmethod
    def load(cls, home: Path | None = None) -> "Settings":
        path = settings_file(home)
        if not path.exists():
            return cls()
        text = path.read_text(encoding="utf-8")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise UserError(f"{path}:{toml_error_line(error, text)}: not valid TOML ({error}); "
                            "fix or remove the file.") from None
        settings = cls()
        folders = data.get("models", {}).get("folders", [])
        if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
            raise UserError(f"{path}: models.folders must be a list of paths; fix the file.")
        settings.model_folders = folders
        settings.webhook_url = data.get("notifications", {}).get("webhook_url")
        runs = data.get("runs", {})
        settings.cancel_grace_seconds = float(runs.get("cancel_grace_seconds", 30.0))
        stop = runs.get("stop_on_divergence", False)
        if not isinstance(stop, bool):
            raise UserError(f"{path}: runs.stop_on_divergence must be true or false, not "
                            f"{stop!r}; fix the file.")
        settings.stop_on_divergence = stop
        return settings

    def save(self, home: Path | None = None) -> None:
        """Write these settings into config.toml, keeping every other key the file holds
        (the dashboard's [keys] and notification choices, a user's own notes)."""
        path = settings_file(home)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, tomllib.TOMLDecodeError):
            data = {}
        data.setdefault("models", {})["folders"] = list(self.model_folders)
        runs = data.setdefault("runs", {})
        runs["cancel_grace_seconds"] = self.cancel_grace_seconds
        if self.webhook_url:
            data.setdefault("notifications", {})["webhook_url"] = self.webhook_url
        elif "notifications" in data:
            data["notifications"].pop("webhook_url", None)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, tomli_w.dumps(data))

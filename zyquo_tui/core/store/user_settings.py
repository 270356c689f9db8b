"""User settings from $ZYQUO_HOME/config.toml: model folders, notifications, run control, the
disk's floor and the logs' size.

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


DEFAULT_DISK_FLOOR_BYTES = 2 << 30
DEFAULT_LOG_MAX_BYTES = 10 << 20
DEFAULT_LOG_BACKUPS = 3


def _section(path: Path, data: dict, name: str) -> dict:
    """`[name]` of config.toml: a table, or one sentence saying it is not one."""
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise UserError(f"{path}: {name} must be a table ([{name}] and its keys), not "
                        f"{table!r}; fix the file.")
    return table


def _typed(path: Path, table: dict, section: str, key: str, kind: type, default, *,
           minimum: int | None = None):
    """`[section] key` of config.toml, checked: one sentence naming the key when it is wrong.
    `kind` float takes any number (TOML writes 30 and 30.0 alike); str takes text."""
    value = table.get(key, default)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok or (minimum is not None and value < minimum):
        wanted = {bool: "true or false", float: "a number", str: "text"}.get(
            kind, "a whole number")
        if minimum is not None:
            wanted += f" of at least {minimum}"
        raise UserError(f"{path}: [{section}] {key} must be {wanted}, not {value!r}; "
                        "fix the file.")
    return value


@dataclass
class Settings:
    """What a user can set in config.toml. Missing keys take these defaults."""

    model_folders: list[str] = field(default_factory=list)
    webhook_url: str | None = None
    cancel_grace_seconds: float = 30.0
    # A train loss that diverges always raises a warning; this decides whether it also
    # stops the run ([runs] stop_on_divergence; core/runs/stopping.py has the rule).
    stop_on_divergence: bool = False
    # `runs recover` (at boot) resumes the runs that died with the machine.
    auto_resume: bool = True
    # Free space the trainer leaves on the store's disk: it stops (cause `disk`) while the
    # disk still holds this much plus one more checkpoint.
    disk_floor_bytes: int = DEFAULT_DISK_FLOOR_BYTES
    # trainer.log and runner.log are rotated at this size, keeping this many older files.
    log_max_bytes: int = DEFAULT_LOG_MAX_BYTES
    log_backups: int = DEFAULT_LOG_BACKUPS

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
        folders = _section(path, data, "models").get("folders", [])
        if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
            raise UserError(f"{path}: models.folders must be a list of paths; fix the file.")
        settings.model_folders = folders
        notifications = _section(path, data, "notifications")
        if notifications.get("webhook_url") is not None:
            settings.webhook_url = _typed(path, notifications, "notifications", "webhook_url",
                                          str, None)
        runs = _section(path, data, "runs")
        settings.cancel_grace_seconds = float(_typed(path, runs, "runs", "cancel_grace_seconds",
                                                     float, 30.0, minimum=0))
        settings.stop_on_divergence = _typed(path, runs, "runs", "stop_on_divergence", bool,
                                             False)
        settings.auto_resume = _typed(path, runs, "runs", "auto_resume", bool, True)
        disk = _section(path, data, "disk")
        settings.disk_floor_bytes = _typed(path, disk, "disk", "floor_bytes", int,
                                           DEFAULT_DISK_FLOOR_BYTES, minimum=0)
        logs = _section(path, data, "logs")
        settings.log_max_bytes = _typed(path, logs, "logs", "max_bytes", int,
                                        DEFAULT_LOG_MAX_BYTES, minimum=4096)
        settings.log_backups = _typed(path, logs, "logs", "backups", int,
                                      DEFAULT_LOG_BACKUPS, minimum=1)
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

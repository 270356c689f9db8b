"""User settings from $ZYQUO_HOME/config.toml: model folders, notifications, the dashboard's
keys, run control, the disk's floor and the logs' size. The one reader of the file: the
dashboard takes its notifications and keys from the same Settings the commands use, so a
wrong value is refused in one sentence (file:line) wherever it is read.

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
from zyquo_tui.core.runs.value_checks import size_in_bytes
from zyquo_tui.core.store.atomic import write_atomic
from zyquo_tui.core.store.paths import settings_file


def toml_error_line(error: tomllib.TOMLDecodeError, text: str) -> int:
    """The line of a TOML error (Python 3.11's tomllib gives it only inside the message)."""
    match = re.search(r"at line (\d+)", str(error))
    return int(match.group(1)) if match else max(1, len(text.splitlines()))


DEFAULT_DISK_FLOOR_BYTES = 2 << 30
DEFAULT_LOG_MAX_BYTES = 10 << 20
DEFAULT_LOG_BACKUPS = 3
DESKTOP_CHOICES = ("auto", "osc9", "osc777", "off")

_HEADER = re.compile(r"\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_ASSIGNED = re.compile(r"""("[^"]*"|'[^']*'|[A-Za-z0-9_.-]+)\s*=""")


def key_line(text: str, section: str, key: str | None = None) -> int | None:
    """The line of config.toml that sets `[section] key` (or `section` itself when key is
    None), for a sentence's file:line; None where the file writes it some other way."""
    table = ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = _HEADER.match(stripped)
        if header:
            table = header.group(1).strip("\"'")
            if key is None and table == section:
                return number
            continue
        assigned = _ASSIGNED.match(stripped)
        if not assigned:
            continue
        name = assigned.group(1).strip("\"'")
        if key is None:
            found = table == "" and name == section
        else:  # in its table, or dotted at the top (`runs.auto_resume = true`)
            found = (table == section and name == key) or \
                (table == "" and name == f"{section}.{key}")
        if found:
            return number
    return None


class _Reader:
    """config.toml's text and tables, and the one sentence for a value that is wrong:
    `FILE:LINE: [section] key must be ...; fix the file.`"""

    def __init__(self, path: Path, text: str, data: dict) -> None:
        self.path = path
        self.text = text
        self.data = data

    def refuse(self, section: str, key: str | None, sentence: str) -> UserError:
        line = key_line(self.text, section, key)
        where = f"{self.path}:{line}" if line else f"{self.path}"
        return UserError(f"{where}: {sentence}; fix the file.")

    def section(self, name: str) -> dict:
        """`[name]`: a table, or one sentence saying it is not one."""
        table = self.data.get(name, {})
        if not isinstance(table, dict):
            raise self.refuse(name, None, f"{name} must be a table ([{name}] and its keys), "
                                          f"not {table!r}")
        return table

    def typed(self, section: str, key: str, kind: type, default, *,
              minimum: int | None = None, choices: tuple[str, ...] = ()):
        """`[section] key`, checked. `kind` float takes any number (TOML writes 30 and 30.0
        alike); str takes text, one of `choices` when they are given."""
        value = self.section(section).get(key, default)
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if choices:
            ok = ok and value in choices
        if not ok or (minimum is not None and value < minimum):
            wanted = {bool: "true or false", float: "a number", str: "text"}.get(
                kind, "a whole number")
            if choices:
                wanted = "one of " + ", ".join(f'"{choice}"' for choice in choices)
            if minimum is not None:
                wanted += f" of at least {minimum}"
            raise self.refuse(section, key, f"[{section}] {key} must be {wanted}, "
                                            f"not {value!r}")
        return value


def read_config(home: Path | None = None) -> _Reader | None:
    """config.toml read and parsed (None when there is none); one sentence when it cannot
    be. Each table's reader (Settings here, serve_settings.py for `[serve]`) checks its own."""
    path = settings_file(home)
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: cannot be read ({error}); fix or remove the file.") \
            from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{path}:{toml_error_line(error, text)}: not valid TOML ({error}); "
                        "fix or remove the file.") from None
    return _Reader(path, text, data)


@dataclass
class NotificationSettings:
    """How a run's end reaches the user: `[notifications]` (docs/dashboard.md). `desktop` is
    one of DESKTOP_CHOICES; a webhook_url of only spaces is no webhook."""

    desktop: str = "auto"
    bell: bool = True
    webhook_url: str | None = None


@dataclass
class Settings:
    """What a user can set in config.toml. Missing keys take these defaults."""

    model_folders: list[str] = field(default_factory=list)
    notifications: NotificationSettings = field(default_factory=NotificationSettings)
    # [keys]: the dashboard's binding ids to keys, e.g. "run.cancel" = "x" (docs/dashboard.md).
    keys: dict[str, str] = field(default_factory=dict)
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
    # [memory] limit: the most memory a run on this machine may use, unless the run sets its
    # own memory_limit (a size such as "16GB"; None: the machine's budget decides).
    memory_limit_bytes: int | None = None

    @classmethod
    def load(cls, home: Path | None = None) -> "Settings":
        read = read_config(home)
        if read is None:
            return cls()
        settings = cls()
        folders = read.section("models").get("folders", [])
        if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
            raise read.refuse("models", "folders", "[models] folders must be a list of paths")
        settings.model_folders = folders
        url = read.typed("notifications", "webhook_url", str, "")
        settings.notifications = NotificationSettings(
            desktop=read.typed("notifications", "desktop", str, "auto",
                               choices=DESKTOP_CHOICES),
            bell=read.typed("notifications", "bell", bool, True),
            webhook_url=url.strip() or None)
        for binding in read.section("keys"):
            read.typed("keys", binding, str, None)
        settings.keys = {str(binding): key for binding, key in read.section("keys").items()}
        settings.cancel_grace_seconds = float(read.typed("runs", "cancel_grace_seconds", float,
                                                         30.0, minimum=0))
        settings.stop_on_divergence = read.typed("runs", "stop_on_divergence", bool, False)
        settings.auto_resume = read.typed("runs", "auto_resume", bool, True)
        settings.disk_floor_bytes = read.typed("disk", "floor_bytes", int,
                                               DEFAULT_DISK_FLOOR_BYTES, minimum=0)
        settings.log_max_bytes = read.typed("logs", "max_bytes", int, DEFAULT_LOG_MAX_BYTES,
                                            minimum=4096)
        settings.log_backups = read.typed("logs", "backups", int, DEFAULT_LOG_BACKUPS,
                                          minimum=1)
        limit = read.section("memory").get("limit")
        if limit is not None:
            size = size_in_bytes(limit)
            if size is None or size < 1 << 20:
                raise read.refuse("memory", "limit", f"[memory] limit must be a size of at "
                                  f"least 1 MiB such as \"16GB\", not {limit!r}")
            settings.memory_limit_bytes = size
        return settings

    def save(self, home: Path | None = None) -> None:
        """Write these settings into config.toml, keeping every other key the file holds
        (the dashboard's [keys] and notification choices, a user's own notes): only the
        model folders, the cancel grace and the webhook are written."""
        path = settings_file(home)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, tomllib.TOMLDecodeError):
            data = {}
        data.setdefault("models", {})["folders"] = list(self.model_folders)
        runs = data.setdefault("runs", {})
        runs["cancel_grace_seconds"] = self.cancel_grace_seconds
        if self.notifications.webhook_url:
            data.setdefault("notifications", {})["webhook_url"] = self.notifications.webhook_url
        elif "notifications" in data:
            data["notifications"].pop("webhook_url", None)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, tomli_w.dumps(data))

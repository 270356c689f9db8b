"""Where zyquo-tui keeps its files: $ZYQUO_HOME (default ~/.zyquo) and its layout."""

from __future__ import annotations

import os
from pathlib import Path

from zyquo_tui.core.errors import UserError

HOME_ENV = "ZYQUO_HOME"


def zyquo_home() -> Path:
    """The root of the store, from $ZYQUO_HOME or ~/.zyquo (not created here)."""
    value = os.environ.get(HOME_ENV)
    if value:
        return Path(value).expanduser()
    return Path.home() / ".zyquo"


def file_in_the_way(path: Path, what: str) -> UserError:
    """The error for reading `path` when a file stands where it or a parent folder should be
    (reading raised NotADirectoryError): it names that file, not `path`."""
    blocking = Path(path)
    while not blocking.exists() and blocking != blocking.parent:
        blocking = blocking.parent
    return UserError(f"{blocking} is a file, but zyquo-tui needs a folder there for {what}: "
                     f"move the file away or set ${HOME_ENV} to another folder.")


def ensure_dir(path: Path, what: str, remedy: str | None = None) -> Path:
    """Create `path` (mode 0700) if missing; explain clearly when that is impossible.

    `remedy` says what to do instead of moving the store, for a folder the user named
    (`runs export -o`): another $ZYQUO_HOME would not help there.
    """
    if path.exists() and not path.is_dir():
        raise UserError(
            f"{path} is a file, but zyquo-tui needs a folder there for {what}: "
            f"move the file away or {remedy or f'set ${HOME_ENV} to another folder'}."
        )
    remedy = remedy or f"set ${HOME_ENV} to a folder you can write"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except NotADirectoryError:
        raise UserError(
            f"Cannot create {path} for {what}: a file stands where one of its parent folders "
            f"should be; {remedy}."
        ) from None
    except PermissionError:
        raise UserError(
            f"Cannot create {path} for {what}: permission denied; {remedy}."
        ) from None
    except OSError as error:
        raise UserError(
            f"Cannot create {path} for {what}: {error.strerror}; {remedy}."
        ) from None
    return path


def models_dir(home: Path | None = None) -> Path:
    """Models the tool made or fused (the sample model lives here)."""
    return (home or zyquo_home()) / "models"


def presets_dir(home: Path | None = None) -> Path:
    return (home or zyquo_home()) / "presets"


def settings_file(home: Path | None = None) -> Path:
    return (home or zyquo_home()) / "config.toml"

"""The key a Tinker program gives `zyquo-tui serve` (its TINKER_API_KEY).

Made on the server's first start and kept in the store as `tinker_api_key`, readable by its
owner only (0600), so the same key works after a restart and `zyquo-tui serve --show-key`
prints it without starting anything. The SDK takes a key only when it starts with `tml-`.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.paths import ensure_dir, zyquo_home

KEY_FILE = "tinker_api_key"
PREFIX = "tml-"


def key_path(home: Path | None = None) -> Path:
    return (home or zyquo_home()) / KEY_FILE


def load_or_create_key(home: Path | None = None) -> str:
    """The server's key: read from the store, or made and written there (0600) at first."""
    path = key_path(home)
    if path.is_file():
        key = path.read_text(encoding="utf-8").strip()
        if key.startswith(PREFIX) and len(key) > len(PREFIX):
            return key
        raise UserError(f"{path} does not hold a key starting with {PREFIX!r}: delete it and "
                        "start `zyquo-tui serve` again to make a new key.")
    ensure_dir(path.parent, "the store")
    key = PREFIX + secrets.token_urlsafe(32)
    # Created 0600 from the start (O_EXCL: never over a file another start just wrote).
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return load_or_create_key(home)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(key + "\n")
    return key


def key_matches(given: str | None, key: str) -> bool:
    """Whether a request's key is the server's (compared in constant time)."""
    return given is not None and hmac.compare_digest(given.encode(), key.encode())

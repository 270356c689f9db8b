"""Whether two model folders share a tokenizer's vocabulary, read from their files (no mlx, no
transformers): what distillation needs of a teacher, since its loss compares the teacher's and
the student's next-token distributions token id by token id.

The rule: two tokenizers are the same when they map the same token strings to the same ids,
the tokenizer's model vocabulary and its added (special) tokens together, as
`tokenizer.get_vocab()` compares them in the trainer, read from the first kind of file both
folders have. The vocabulary of `tokenizer.json` (a BPE or WordPiece `vocab` table, a Unigram
list of pieces in id order) and its `added_tokens`, or of `vocab.json` and
`added_tokens.json` (the older layout), is compared as a digest; a SentencePiece
`tokenizer.model` by its bytes. Two folders with no such file in common say nothing (None:
the trainer's own check decides). Digests are kept per file (path, size, mtime), so the setup
form can ask on every keystroke.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

# The files that define a vocabulary, in the order they are trusted.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")

_digests: dict[tuple[str, int, int], str | None] = {}


def _file_key(path: Path) -> tuple[str, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


def _vocabulary_items(folder: Path, name: str) -> list[tuple[str, int]] | None:
    """The (token, id) pairs of a tokenizer file; None when it cannot be read as one."""
    try:
        data: Any = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if name == "tokenizer.json":
        if not isinstance(data, dict):
            return None
        vocab = (data.get("model") or {}).get("vocab")
        added = data.get("added_tokens") or []
    else:  # vocab.json, with added_tokens.json beside it when there is one
        vocab = data
        try:
            extra = json.loads((folder / "added_tokens.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            extra = {}
        added = [{"content": token, "id": index} for token, index in
                 (extra.items() if isinstance(extra, dict) else [])]
    items: dict[str, int] = {}
    if isinstance(vocab, dict):
        items.update({str(token): int(index) for token, index in vocab.items()
                      if isinstance(index, int)})
    elif isinstance(vocab, list):  # Unigram: [piece, score] in id order
        items.update({str(piece[0]): index for index, piece in enumerate(vocab)
                      if isinstance(piece, list) and piece})
    else:
        return None
    for token in added:
        if isinstance(token, dict) and isinstance(token.get("id"), int):
            items[str(token.get("content"))] = token["id"]
    return sorted(items.items())


def _file_digest(folder: Path, name: str) -> str | None:
    key = _file_key(folder / name)
    if key is None:
        return None
    if key not in _digests:
        if name == "tokenizer.model":
            _digests[key] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        else:
            items = _vocabulary_items(folder, name)
            _digests[key] = (None if items is None else hashlib.sha256(
                json.dumps(items, ensure_ascii=False).encode()).hexdigest())
    return _digests[key]


def vocabulary_digest(folder: str | Path) -> str | None:
    """A digest of the folder's tokenizer vocabulary, from the first tokenizer file it has
    (TOKENIZER_FILES' order); None when it has none this module reads."""
    folder = Path(folder).expanduser()
    for name in TOKENIZER_FILES:
        digest = _file_digest(folder, name)
        if digest is not None:
            return digest
    return None


def same_vocabulary(first: str | Path, second: str | Path) -> bool | None:
    """Whether two model folders' tokenizers map the same tokens to the same ids, compared
    through the first kind of tokenizer file both have; None when they have none in common
    that this module reads (a tokenizer.json beside a tokenizer.model alone says nothing)."""
    one, other = Path(first).expanduser(), Path(second).expanduser()
    for name in TOKENIZER_FILES:
        a, b = _file_digest(one, name), _file_digest(other, name)
        if a is not None and b is not None:
            return a == b
    return None

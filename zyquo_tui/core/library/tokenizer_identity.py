"""Whether two model folders share a tokenizer's vocabulary, read from their files (no mlx, no
transformers): what distillation needs of a teacher, since its loss compares the teacher's and
the student's next-token distributions token id by token id.

The rule: two tokenizers are the same when they map the same token strings to the same ids,
the tokenizer's model vocabulary and its added (special) tokens together, as
`tokenizer.get_vocab()` compares them in the trainer. The vocabulary of `tokenizer.json` (a BPE or WordPiece
`vocab` table, a Unigram list of pieces in id order) and its `added_tokens`, or of `vocab.json`
and `added_tokens.json` (the older layout), is compared as a digest. A SentencePiece
`tokenizer.model` alone is compared by its bytes. A folder with none of these says nothing
(None: the trainer's own check decides). Digests are kept per file (path, size, mtime), so the
setup form can ask on every keystroke.
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


def vocabulary_digest(folder: str | Path) -> str | None:
    """A digest of the folder's tokenizer vocabulary; None when it has no tokenizer file
    this module reads."""
    folder = Path(folder).expanduser()
    for name in TOKENIZER_FILES:
        key = _file_key(folder / name)
        if key is None:
            continue
        if key not in _digests:
            if name == "tokenizer.model":
                _digests[key] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
            else:
                items = _vocabulary_items(folder, name)
                _digests[key] = (None if items is None else hashlib.sha256(
                    json.dumps(items, ensure_ascii=False).encode()).hexdigest())
        return _digests[key]
    return None


def same_vocabulary(first: str | Path, second: str | Path) -> bool | None:
    """Whether two model folders' tokenizers map the same tokens to the same ids; None when
    either folder's tokenizer cannot be read here."""
    one, other = vocabulary_digest(first), vocabulary_digest(second)
    if one is None or other is None:
        return None
    return one == other

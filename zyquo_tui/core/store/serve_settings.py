"""The Tinker server's limits: config.toml's `[serve]` table (docs/tinker-server.md, "Limits").

A server that stays up for days must not let one request take its memory: each limit bounds
what a single request may make the server hold (its body, the answers it asks for, the tokens
and tensor elements it sends). A request over a limit is refused with a 400 (a 413 for the
body) saying which limit and how to stay under it; the server goes on serving.

    [serve]
    max_body_bytes = "16MiB"       # a request's body, after zstd decompression too
    max_datums = 1024              # datums of one forward_backward request
    max_num_samples = 128          # answers of one sample request
    max_tokens = 16384             # tokens of one answer (SamplingParams.max_tokens)
    max_sequence_tokens = 32768    # tokens of one datum's model_input, or of a prompt
    max_tensor_elements = 16777216 # elements of one loss_fn_inputs tensor (its shape)
    idle_seconds = 3600            # a sampler or model unused this long may be freed
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from zyquo_tui.core.runs.value_checks import size_in_bytes
from zyquo_tui.core.store.user_settings import read_config

SECTION = "serve"


@dataclass(frozen=True)
class ServeSettings:
    """What one request may ask of the server; the defaults fit a 16 GB machine serving a
    few programs (a 16 MiB body holds about 4M tokens with their weights)."""

    max_body_bytes: int = 16 << 20
    # The SDK splits a batch into requests of at most this many datums (the server's client
    # config tells it), so a program never meets it; a hand-made request of millions of
    # empty datums would cost the server far more memory than its bytes.
    max_datums: int = 1024
    max_num_samples: int = 128
    max_tokens: int = 16384
    max_sequence_tokens: int = 32768
    max_tensor_elements: int = 16 << 20
    idle_seconds: float = 3600.0

    @classmethod
    def load(cls, home: Path | None = None) -> ServeSettings:
        """`[serve]` of the store's config.toml, each value checked; defaults for what it
        does not set. A wrong value is a UserError of one sentence with its file:line."""
        read = read_config(home)
        if read is None:
            return cls()
        table = read.section(SECTION)
        known = {f.name for f in fields(cls)}
        for key in table:
            if key not in known:
                raise read.refuse(SECTION, key, f"[{SECTION}] has no setting {key!r} (it has "
                                  f"{', '.join(sorted(known))})")
        values = {}
        body = table.get("max_body_bytes", cls.max_body_bytes)
        size = size_in_bytes(body) if not isinstance(body, bool) else None
        if size is None or size < 4096:
            raise read.refuse(SECTION, "max_body_bytes", f"[{SECTION}] max_body_bytes must be "
                              f"a size of at least 4096 bytes, such as \"16MiB\" or 16777216, "
                              f"not {body!r}")
        values["max_body_bytes"] = size
        for name in ("max_datums", "max_num_samples", "max_tokens", "max_sequence_tokens",
                     "max_tensor_elements"):
            values[name] = read.typed(SECTION, name, int, getattr(cls, name), minimum=1)
        values["idle_seconds"] = float(read.typed(SECTION, "idle_seconds", float,
                                                  cls.idle_seconds, minimum=1))
        return cls(**values)

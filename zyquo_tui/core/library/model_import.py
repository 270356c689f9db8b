"""`models import`: a GGUF file into the library ($ZYQUO_HOME/models/NAME), one route for the
command line and the dashboard's models screen.

The import needs mlx and runs as `python -m zyquo_tui.trainer.gguf_import FILE OUT --json` in
a subprocess; this module checks the request first (the file, the name), starts it and turns
its failure into one sentence.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zyquo_tui.core.errors import EXIT_PROBLEMS, EXIT_USAGE, UserError
from zyquo_tui.core.library.gguf_files import GGUFFile, find_gguf
from zyquo_tui.core.library.models import discover_models
from zyquo_tui.core.store.paths import ensure_dir, models_dir, zyquo_home
from zyquo_tui.core.system.child_process import run_child
from zyquo_tui.core.system.entry_points import GGUF_IMPORTER, python_command

DTYPES = ("auto", "float32", "float16", "bfloat16")
# A library name: a folder name and a shell word without quoting.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A 70B file dequantized takes a while; the smallest import takes seconds.
IMPORT_TIMEOUT_SECONDS = 4 * 3600


def resolve_gguf(name_or_path: str) -> GGUFFile:
    """The GGUF file a user named (a path, or a name `zyquo-tui models` lists as importable);
    UserError (one sentence) when there is none or it cannot be imported."""
    entry = find_gguf(name_or_path)
    if entry is None:
        raise UserError(f"No GGUF file {name_or_path!r}: give a .gguf file, or a name "
                        "`zyquo-tui models` lists under importable GGUF files.")
    if not entry.importable:
        raise UserError(entry.status_detail)
    return entry


def check_import_name(name: str, home: Path) -> Path:
    """The folder $ZYQUO_HOME/models/NAME an import would make; UserError when the name is not
    a plain folder name or a model is listed under it already."""
    if not _NAME.fullmatch(name):
        raise UserError(f"{name!r} cannot name a model: use letters, digits, '.', '_' and '-' "
                        "(no '/'), starting with a letter or digit.")
    out = models_dir(home) / name
    if out.exists() or out.is_symlink():
        raise UserError(f"A model named {name!r} exists already ({out}); choose another "
                        "with --name, or delete it first.")
    taken = next((m for m in discover_models(home) if m.name == name), None)
    if taken is not None:
        raise UserError(f"A model named {name!r} is listed already ({taken.path}); choose "
                        "another with --name.")
    return out


def import_gguf_model(name_or_path: str, name: str | None = None, dtype: str = "auto",
                      dequantize: bool = False, home: Path | None = None,
                      cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Import a GGUF file into the library; what the importer reports, with `name`. UserError
    in one sentence for bad input (exit 2) and for an import that failed (exit 1); nothing is
    left in the library then."""
    home = home or zyquo_home()
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}.")
    entry = resolve_gguf(name_or_path)
    name = name or entry.import_name
    out = check_import_name(name, home)
    ensure_dir(models_dir(home), "models")
    try:
        status, stdout, stderr = run_child(
            python_command(GGUF_IMPORTER, str(entry.path), str(out), "--dtype", dtype,
                           *(["--dequantize"] if dequantize else []), "--json"),
            timeout=IMPORT_TIMEOUT_SECONDS, cancelled=cancelled,
            what=f"The import of {entry.name}", timeout_hint="try a smaller file")
    except UserError:
        _remove_partial(out)
        raise
    if status != 0:
        _remove_partial(out)
        last = (stderr.strip().splitlines() or ["the importer printed nothing"])[-1]
        if status == EXIT_USAGE:
            raise UserError(last)
        raise UserError(f"The import of {entry.name} failed: {last}", EXIT_PROBLEMS)
    return {"name": name, "source": str(entry.path), **json.loads(stdout)}


def _remove_partial(out: Path) -> None:
    # The importer builds `.NAME.*` beside its destination and renames it into place; a child
    # killed (cancelled, timed out) leaves that staging folder, never `out` half-made.
    for staging in out.parent.glob(f".{out.name}.*"):
        shutil.rmtree(staging, ignore_errors=True)

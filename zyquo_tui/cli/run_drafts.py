"""The command line's choices as a RunDraft (core/setup/draft.py): `runs new`, `runs
import-config`, `runs grid` and `plan` read their flags and config file through here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zyquo_tui.cli.setting_flags import unnamed_schedule
from zyquo_tui.core.errors import UserError
from zyquo_tui.core.setup.draft import RunDraft


def draft_from_command_line(config: dict[str, Any], *, source: str, base_dir: Path | None,
                            refused: str, model: str | None = None, data: str | None = None,
                            settings: dict[str, Any] | None = None, method: str | None = None,
                            name: str | None = None,
                            config_file: Path | None = None) -> RunDraft:
    """The draft of an mlx-lm config (empty when none was given) with the command line's
    model, data, method, settings and name over it; UserError when the config, the model or
    a flag cannot make one (`refused` and the sentence for a schedule's flag without a
    schedule; a draft's problems are `to_run(refused=...)`'s)."""
    settings = settings or {}
    if "iters" in settings and "epochs" in settings:
        raise UserError(f"{refused}--iters and --epochs were both given; give one of them "
                        "(--epochs N trains N passes over train.jsonl, made into iterations "
                        "from its rows and --batch-size).")
    if config or config_file is not None:
        draft = RunDraft.from_mlx_config(config, source=source, base_dir=base_dir,
                                         config_file=config_file, model=model, data=data,
                                         method=method, settings=settings, name=name)
    else:
        draft = RunDraft.from_choices(model=model, data=data, method=method,
                                      settings=settings, name=name)
    unnamed = unnamed_schedule(draft.hyperparameters, settings)
    if unnamed is not None:
        raise UserError(f"{refused}{unnamed}")
    return draft


def refuse_rows_that_cannot_train(draft: RunDraft, refused: str) -> None:
    """UserError (exit 2) when a row of the draft's dataset would stop the run (broken JSON, a
    row unlike the first, a missing field: every row checked, as `data check` and the new-run
    form check them; the form refuses to start such a run too). The draft's own checks come
    first (`to_run`): a missing folder or file is theirs to say."""
    from zyquo_tui.core.library.datasets import validate_dataset
    from zyquo_tui.core.library.rows import ERROR

    if draft.data_path is None or not Path(draft.data_path).is_dir():
        return
    report = validate_dataset(draft.data_path, batch_size=draft.hyperparameters.batch_size)
    errors = [problem for problem in report.problems if problem.severity == ERROR]
    if errors:
        count = f"{len(errors)} error{'s' if len(errors) != 1 else ''}"
        raise UserError(f"{refused}the dataset has {count} that would stop the run (the first: "
                        f"{errors[0]}); `zyquo-tui data check {draft.data_path}` lists them "
                        "all.")

"""The RestClient's training runs and checkpoints, read from the run store (tinker 0.38's
`GET /api/v1/training_runs[/RUN[/checkpoints]]`, `GET /api/v1/checkpoints`,
`DELETE /api/v1/training_runs/RUN/checkpoints/KIND/NAME`, `POST /api/v1/weights_info`).

A training run is a served run (run.json's `process.served_by`, Run.served): its id is the
run's id, the first part of its tinker:// paths. Its checkpoints are the folders its program
saved under the run's folder, `runs/RUN/tinker/weights/NAME/` (save_state, "training") and
`runs/RUN/tinker/sampler_weights/NAME/` (save_weights_for_sampler, "sampler"); deleting one
removes its folder. What the program asked for (the base model by the name it gave, the LoRA
settings, its `user_metadata`, which tinker-cookbook reads back to find a checkpoint's
renderer) is kept beside them in `runs/RUN/tinker/training_run.json` when the run is made.

Everything here is files: the routes call it off the event loop (asyncio.to_thread).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Awaitable, Callable

import pydantic
from starlette.requests import Request
from tinker import types

from zyquo_tui.core.errors import UserError
from zyquo_tui.core.store.store import EVENTS_FILE, RUN_FILE, RunStore
from zyquo_tui.server.run_record import TINKER_DIR, TRAINING_RUN_FILE
from zyquo_tui.server.service import UserFacing
from zyquo_tui.server.trained_model import DESCRIPTION_FILE, read_description

# The folder of each kind of checkpoint, and Tinker's name for the kind.
KINDS = {"weights": "training", "sampler_weights": "sampler"}


def tinker_dir(store: RunStore, run_id: str) -> Path:
    return store.run_dir(run_id) / TINKER_DIR


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _plain(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..")


def served_run(store: RunStore, run_id: str):
    """The served run with this id; UserFacing(404) with one sentence when there is none."""
    try:
        run = store.get(run_id)
    except (UserError, OSError):  # OSError: a name no file system holds (too long)
        raise UserFacing(404, f"No training run {run_id} on this server: list_training_runs() "
                         "shows them.") from None
    if not run.served:
        raise UserFacing(404, f"Run {run_id} was not trained through this server (it is a run "
                         "of `zyquo-tui runs`), so it is no Tinker training run.")
    return run


def checkpoint_of(folder: Path, run_id: str, kind: str) -> types.Checkpoint:
    size = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                size += os.stat(os.path.join(root, name)).st_size
            except OSError:  # removed meanwhile
                pass
    return types.Checkpoint(checkpoint_id=f"{kind}/{folder.name}",
                            checkpoint_type=KINDS[kind], time=_time(folder.stat().st_mtime),
                            tinker_path=f"tinker://{run_id}/{kind}/{folder.name}",
                            size_bytes=size)


def run_checkpoints(store: RunStore, run_id: str) -> list[types.Checkpoint]:
    """A run's checkpoints, oldest first."""
    found = []
    for kind in KINDS:
        try:
            with os.scandir(tinker_dir(store, run_id) / kind) as entries:
                folders = [Path(e.path) for e in entries if e.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            continue
        for folder in folders:
            try:
                found.append(checkpoint_of(folder, run_id, kind))
            except OSError:  # deleted meanwhile
                pass
    return sorted(found, key=lambda c: (c.time, c.checkpoint_id))


def training_run(store: RunStore, run) -> types.TrainingRun:
    folder = store.run_dir(run.id)
    try:
        about = json.loads((folder / TINKER_DIR / TRAINING_RUN_FILE).read_text("utf-8"))
    except (OSError, ValueError):  # made before the server kept it: what run.json says
        from zyquo_tui.core.runs.settings import SETTINGS

        about = {"base_model": run.model, "lora_rank": SETTINGS["rank"].get(
            run.hyperparameters)}
    touched = []
    for name in (RUN_FILE, EVENTS_FILE):  # written at each step
        try:
            touched.append((folder / name).stat().st_mtime)
        except OSError:
            pass
    checkpoints = run_checkpoints(store, run.id)
    last = {kind: next((c for c in reversed(checkpoints) if c.checkpoint_type == kind), None)
            for kind in KINDS.values()}
    return types.TrainingRun(
        training_run_id=run.id, base_model=about["base_model"], model_owner=getpass.getuser(),
        is_lora=True, lora_rank=about.get("lora_rank"),
        last_request_time=_time(max(touched, default=0.0)),
        last_checkpoint=last["training"], last_sampler_checkpoint=last["sampler"],
        user_metadata=about.get("user_metadata"))


def served_runs(store: RunStore) -> list:
    """Every served run, newest first. Only runs with a tinker/ folder are read (the server
    makes one for each), so a store of 10,000 runs of `zyquo-tui runs` costs a stat each."""
    runs = []
    for run_id in reversed(store.iter_run_names()):
        if not (store.runs_root / run_id / TINKER_DIR).is_dir():
            continue
        try:
            run = store.get(run_id)
        except UserError:  # damaged or deleted meanwhile: not listed
            continue
        if run.served:
            runs.append(run)
    return runs


def _page(items: list, limit: int, offset: int) -> tuple[list, types.Cursor]:
    return items[offset:offset + limit], types.Cursor(offset=offset, limit=limit,
                                                      total_count=len(items))


def list_training_runs(store: RunStore, limit: int, offset: int) -> types.TrainingRunsResponse:
    page, cursor = _page(served_runs(store), limit, offset)
    return types.TrainingRunsResponse(training_runs=[training_run(store, r) for r in page],
                                      cursor=cursor)


def list_user_checkpoints(store: RunStore, limit: int, offset: int
                          ) -> types.CheckpointsListResponse:
    """Every served run's checkpoints, newest first (as Tinker lists them)."""
    every = [c for run in served_runs(store) for c in run_checkpoints(store, run.id)]
    every.sort(key=lambda c: (c.time, c.tinker_path), reverse=True)
    page, cursor = _page(every, limit, offset)
    return types.CheckpointsListResponse(checkpoints=page, cursor=cursor)


def checkpoint_folder(store: RunStore, run_id: str, checkpoint_id: str) -> Path:
    """The folder of `KIND/NAME` in a served run; UserFacing with one sentence otherwise."""
    served_run(store, run_id)
    kind, _, name = checkpoint_id.partition("/")
    if kind not in KINDS or not _plain(name):
        raise UserFacing(400, f"{checkpoint_id!r} is not a checkpoint of this server; its "
                         "checkpoints are weights/NAME and sampler_weights/NAME (tinker://RUN/"
                         "weights/NAME).")
    folder = tinker_dir(store, run_id) / kind / name
    try:
        found = folder.is_dir()
    except OSError:  # a name too long for the file system: no checkpoint has it
        found = False
    if not found:
        raise UserFacing(404, f"Run {run_id} has no checkpoint {checkpoint_id} (no folder "
                         f"{folder}); list_checkpoints({run_id!r}) shows its checkpoints.")
    return folder


def delete_checkpoint(store: RunStore, run_id: str, checkpoint_id: str) -> None:
    shutil.rmtree(checkpoint_folder(store, run_id, checkpoint_id))


def weights_info(store: RunStore, tinker_path: str) -> types.WeightsInfoResponse:
    try:
        parsed = types.ParsedCheckpointTinkerPath.from_tinker_path(tinker_path)
    except ValueError:
        raise UserFacing(400, f"{tinker_path!r} is not a tinker:// path; its form is "
                         "tinker://RUN/weights/NAME or tinker://RUN/sampler_weights/NAME.") \
            from None
    folder = checkpoint_folder(store, parsed.training_run_id, parsed.checkpoint_id)
    if not (folder / DESCRIPTION_FILE).exists():
        raise UserFacing(404, f"{tinker_path} was not saved by this server ({DESCRIPTION_FILE} "
                         "is missing).")
    spec = read_description(folder)  # one sentence (a 400) when it is damaged
    return types.WeightsInfoResponse(base_model=spec.base_model, is_lora=True,
                                     lora_rank=spec.rank, train_unembed=spec.train_unembed,
                                     train_mlp=spec.train_mlp, train_attn=spec.train_attn)


# -- the routes --------------------------------------------------------------------------------

def _count(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise UserFacing(400, f"The query parameter {name} must be a whole number of 0 or "
                         f"more, not {text!r}.")
    return value


Handler = Callable[[Request], Awaitable[dict]]


def rest_routes(home: Path, json_body: Callable[[Request, type], Awaitable[Any]]
                ) -> list[tuple[str, Handler, tuple[str, ...]]]:
    """(path under /api/v1/, handler, methods) of each route; server/app.py guards them and
    gives `json_body`, its reader of a request body as an SDK type."""
    store = RunStore(home)

    def dumped(answer) -> dict:
        return answer.model_dump(mode="json")

    async def training_runs(request: Request) -> dict:
        limit, offset = _count(request, "limit", 20), _count(request, "offset", 0)
        return dumped(await asyncio.to_thread(list_training_runs, store, limit, offset))

    async def one_training_run(request: Request) -> dict:
        def read() -> types.TrainingRun:
            return training_run(store, served_run(store, request.path_params["run_id"]))

        return dumped(await asyncio.to_thread(read))

    async def checkpoints(request: Request) -> dict:
        def read() -> types.CheckpointsListResponse:
            run = served_run(store, request.path_params["run_id"])
            return types.CheckpointsListResponse(checkpoints=run_checkpoints(store, run.id))

        return dumped(await asyncio.to_thread(read))

    async def delete(request: Request) -> dict:
        await asyncio.to_thread(delete_checkpoint, store, request.path_params["run_id"],
                                request.path_params["checkpoint_id"])
        return {}

    async def user_checkpoints(request: Request) -> dict:
        limit, offset = _count(request, "limit", 100), _count(request, "offset", 0)
        return dumped(await asyncio.to_thread(list_user_checkpoints, store, limit, offset))

    async def info(request: Request) -> dict:
        body = await json_body(request, WeightsInfoRequest)
        return dumped(await asyncio.to_thread(weights_info, store, body.tinker_path))

    return [
        ("training_runs", training_runs, ("GET",)),
        ("training_runs/{run_id}", one_training_run, ("GET",)),
        ("training_runs/{run_id}/checkpoints", checkpoints, ("GET",)),
        ("training_runs/{run_id}/checkpoints/{checkpoint_id:path}", delete, ("DELETE",)),
        ("checkpoints", user_checkpoints, ("GET",)),
        ("weights_info", info, ("POST",)),
    ]


class WeightsInfoRequest(pydantic.BaseModel):
    """The body of weights_info: the SDK sends {"tinker_path": ...} and has no type for it."""

    tinker_path: str

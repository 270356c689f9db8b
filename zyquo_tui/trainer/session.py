"""One training session of a run: set up, train, and report every outcome as an event.

The session keeps run.json current (state, process, summary) so that the run's lifecycle is
right even when no dashboard is watching.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from zyquo_tui import __version__
from zyquo_tui.core.errors import UserError
from zyquo_tui.core.events import protocol as ev
from zyquo_tui.core.events.metrics import RunMetrics
from zyquo_tui.core.formatting import fmt_bytes
from zyquo_tui.core.runs.failures import (
    Failure,
    failure,
    looks_like_lost_rank,
    looks_like_oom,
)
from zyquo_tui.core.runs.mlx_config import dump_mlx_yaml, run_to_mlx_config
from zyquo_tui.core.runs.problems import errors_in
from zyquo_tui.core.runs.run import ALLOWED_TRANSITIONS, Run, RunState
from zyquo_tui.core.runs.settings import SETTINGS, Method
from zyquo_tui.core.runs.stopping import (
    DIVERGED,
    EARLY_STOPPING,
    NO_REWARD_SIGNAL,
    DivergenceWatch,
    EarlyStopping,
    RewardSignalWatch,
)
from zyquo_tui.core.store.logs import rotate_if_large
from zyquo_tui.core.store.store import CONFIG_FILE, EVENTS_FILE, LOG_FILE, RunStore
from zyquo_tui.core.store.user_settings import Settings
from zyquo_tui.core.system.disk_space import free_bytes
from zyquo_tui.trainer.checkpoints import CheckpointWriteError
from zyquo_tui.core.system.machine import peak_resident_bytes, resident_bytes
from zyquo_tui.trainer.step_hold import hold_after
from zyquo_tui.trainer.trainer_failure import TrainerFailure, fail

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_RANK_LOST = 3  # another rank of a distributed run is gone


class TrainingSession:
    """Trains the run in `run_dir` from its record, from scratch or from a saved step."""

    primary = True  # rank 0 of a distributed run, or the only process: it writes the files

    def __init__(self, run_dir: Path, stop) -> None:
        self.run_dir = run_dir
        self.store = RunStore(run_dir.parent.parent)
        self.run_id = run_dir.name
        self.stop = stop
        self.events = ev.EventWriter(run_dir / EVENTS_FILE)
        self.summary: dict[str, Any] = {}
        self.step = 0
        self.loop = None
        # Stopping before the last step by a rule the user chose (core/runs/stopping.py).
        self.early_stopping: EarlyStopping | None = None
        self.divergence = DivergenceWatch()
        self.reward_signal = RewardSignalWatch()  # a grpo run that learns nothing, said once
        self.stop_on_divergence = False
        self.stop_reason: str | None = None
        self.stop_message = ""
        self.sampler = None  # trainer/samples.py Sampler, with --sample-prompts
        self.evaluation = None  # trainer/evaluation.py InRunEvaluation, with --eval-every
        self.evaluated_step: int | None = None  # the step the last eval event was of
        self.settings = Settings()
        # Why the loop was asked to stop: None for a cancel (a signal), "disk" for the floor.
        self.stop_cause: str | None = None
        self.checkpoint_bytes = 0  # one more checkpoint: estimated, then as last written

    # -- run.json ----------------------------------------------------------------------------

    def _update(self, state: RunState | None = None, **fields: Any) -> None:
        if state is not None and state.is_terminal:
            self.summary["ended_at"] = time.time()
            # The step it ended at, which a cancel's checkpoint can put past the last report.
            self.summary["step"] = max(self.step, self.summary.get("step") or 0)

        def change(run: Run) -> None:
            if state is not None and run.state is not state:
                allowed = ALLOWED_TRANSITIONS[run.state]
                if state not in allowed and RunState.STARTING in allowed:
                    run.set_state(RunState.STARTING)  # started by hand, not by a supervisor
                run.set_state(state)
            run.summary.update(self.summary)
            for key, value in fields.items():
                setattr(run, key, value)
        self.store.update(self.run_id, change)

    # -- events ------------------------------------------------------------------------------

    def _on_train(self, info: dict[str, Any]) -> None:
        rss = peak_resident_bytes()
        if rss is not None:
            info = {**info, "peak_rss_bytes": rss}
        self.events.write(ev.TRAIN, **info)
        steps_in_report = max(info["iteration"] - self.step, 1)
        self.step = info["iteration"]
        self.summary.update(step=self.step, last_train_loss=info["train_loss"],
                            tokens_per_second=info["tokens_per_second"],
                            peak_memory_bytes=max(info["peak_memory_bytes"],
                                                  self.summary.get("peak_memory_bytes", 0)))
        if "reward_mean" in info:  # a grpo run's: what runs list shows where a loss would be
            self.summary["reward_mean"] = info["reward_mean"]
        if rss is not None:
            self.summary["peak_rss_bytes"] = max(rss, self.summary.get("peak_rss_bytes", 0))
        print(f"step {info['iteration']}: train loss {info['train_loss']:.4f}, "
              f"lr {info['learning_rate']:.3g}, {info['tokens_per_second']:.0f} tok/s", flush=True)
        self._watch_divergence(info["iteration"], info["train_loss"])
        if "reward_std" in info and self.reward_signal.observe(
                info["iteration"], steps_in_report, info["reward_std"]):
            self._warn(NO_REWARD_SIGNAL, self.reward_signal.sentence(info["iteration"]),
                       iteration=info["iteration"])

    def _watch_divergence(self, step: int, loss: float) -> None:
        if not self.divergence.observe(loss):
            return
        message = self.divergence.sentence(step, loss)
        stopping = self.stop_on_divergence and self.stop_reason is None
        if stopping:
            message += " The run stops here (runs.stop_on_divergence in config.toml)."
            self.stop_reason, self.stop_message = DIVERGED, message
        self._warn(DIVERGED, message, iteration=step, train_loss=loss,
                   lowest_train_loss=self.divergence.lowest, stopping=stopping)

    def _on_val(self, info: dict[str, Any]) -> None:
        self.events.write(ev.VAL, **info)
        loss = info["val_loss"]
        self.summary["last_val_loss"] = loss
        best = self.summary.get("best_val_loss")
        if best is None or loss < best:
            self.summary.update(best_val_loss=loss, best_val_step=info["iteration"])
        print(f"step {info['iteration']}: val loss {loss:.4f}", flush=True)
        if self.sampler is not None:
            for prompt, text in self.sampler.answers():
                self.events.write(ev.SAMPLE, iteration=info["iteration"], prompt=prompt,
                                  text=text)
        # A grpo run's validation samples answers anyway: a few of them, with their rewards.
        for sample in getattr(self.loop.objective, "samples", ()) if self.loop else ():
            self.events.write(ev.SAMPLE, iteration=info["iteration"], **sample)
        early = self.early_stopping
        if early is not None:
            early.observe(info["iteration"], loss)
            if early.triggered and self.stop_reason is None:
                self.stop_reason, self.stop_message = EARLY_STOPPING, early.sentence()

    def _should_save(self, step: int) -> bool:
        """Early stopping keeps a checkpoint of each new best validation step, so the best
        weights are there to keep however save_every falls; with best_by eval, each evaluated
        step is saved, so the best evaluation has its weights."""
        early = self.early_stopping
        if self.evaluation is not None and self.evaluation.best_by_eval \
                and self.evaluated_step == step:
            return True
        return early is not None and early.best_step == step

    def _after_step(self, step: int) -> None:
        """The adapter as this step left it evaluated on eval_data, every eval_every steps
        and at the last step: an `eval` event."""
        if self.evaluation is None or not self.evaluation.due(step):
            return
        figures = self.evaluation.evaluate()
        self.events.write(ev.EVAL, iteration=step, **figures)
        self.evaluated_step = step
        score = "" if figures["score"] is None else f", {figures['metric']} {figures['score']:.4f}"
        print(f"step {step}: eval answer NLL {figures['nll']:.4f}{score}", flush=True)

    def _should_stop(self) -> bool:
        return self.stop.requested or self.stop_reason is not None

    def _on_checkpoint(self, info: dict[str, Any]) -> None:
        self.events.write(ev.CHECKPOINT, **info)
        try:  # the next one takes as much again, and adapters.safetensors is rewritten beside it
            self.checkpoint_bytes = info["bytes"] + os.path.getsize(info["latest"])
        except OSError:
            pass
        self.summary["latest_checkpoint_step"] = info["iteration"]
        self.step = max(self.step, info["iteration"])
        self._update()

    def _warn(self, code: str, message: str, **fields: Any) -> None:
        self.events.write(ev.WARNING, code=code, message=message, **fields)
        print(f"warning: {message}", flush=True)

    # -- between steps: the disk's floor and the log's bound ----------------------------------

    def _between_steps(self) -> bool:
        """The loop's should_stop: bound trainer.log, then stop for a cancel, a stopping rule
        or a full disk."""
        self._bound_log()
        if self.primary and self.loop is not None:
            hold_after(self.loop.step, self.run_dir, self.stop)  # tests only: step_hold.py
        if self._should_stop():  # a cancel, or a rule the user chose (early stopping...)
            return True
        if self._disk_low() is not None:
            self.stop_cause = "disk"
            return True
        return False

    def _disk_low(self) -> int | None:
        """The free bytes of the store's disk when they are under the floor plus one more
        checkpoint (config.toml [disk] floor_bytes), else None."""
        free = free_bytes(self.run_dir)
        if free is None or free >= self.settings.disk_floor_bytes + self.checkpoint_bytes:
            return None
        return free

    def _bound_log(self) -> None:
        """Rotate trainer.log at its size (config.toml [logs]). Only when our output goes to
        it (the runner's way of starting us): we then point stdout and stderr, ours and
        MLX's alike, at the new file, between steps, so no line is lost or split."""
        log = self.run_dir / LOG_FILE
        try:
            if os.fstat(1).st_ino != os.stat(log).st_ino:
                return
        except OSError:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        if not rotate_if_large(log, self.settings.log_max_bytes, self.settings.log_backups):
            return
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def _estimate_checkpoint_bytes(self, run: Run) -> int:
        """One checkpoint and the latest weights, from the model's headers (core's disk
        verdict), until a real checkpoint says how big they are."""
        try:
            from zyquo_tui.core.memory.disk_verdict import checkpoint_bytes
            from zyquo_tui.core.memory.estimate import TrainingConfig
            from zyquo_tui.core.memory.facts import ModelFacts

            one, weights = checkpoint_bytes(ModelFacts.from_folder(run.model),
                                            TrainingConfig.from_run(run))
            return one + weights
        except (OSError, UserError, ValueError, KeyError):  # a figure, never a reason to fail
            return 0

    def _stopped_for_disk(self, checkpoint: dict[str, Any] | None) -> int:
        free = free_bytes(self.run_dir) or 0
        saved = (f"with a checkpoint at step {checkpoint['iteration']}" if checkpoint
                 else "without a new checkpoint")
        cause = failure("disk", f"The store's disk has {fmt_bytes(free)} free, under its floor "
                        f"of {fmt_bytes(self.settings.disk_floor_bytes)} plus one checkpoint "
                        f"({fmt_bytes(self.checkpoint_bytes)}): the run stopped at step "
                        f"{self.step} {saved}.")
        self._update(RunState.FAILED, failure=cause.to_dict())
        self.events.write(ev.FAILED, iteration=self.step, **cause.to_dict(), traceback=[],
                          checkpoint=checkpoint["iteration"] if checkpoint else None)
        print(f"stopped ({cause.cause}): {cause.message}", file=sys.stderr, flush=True)
        return EXIT_FAILED

    # -- the session -------------------------------------------------------------------------

    def run(self) -> int:
        try:
            run = self.store.get(self.run_id)
            # A resume carries the run's figures on; a start from step 0 (a run stopped before
            # its first checkpoint, started again) begins them anew.
            self.summary = dict(run.summary) if run.resume_from_step is not None else {}
            return self._train(run)
        except TrainerFailure as error:
            return self._failed(error.failure, error)
        except CheckpointWriteError as error:
            free = free_bytes(self.run_dir)
            room = f"; {fmt_bytes(free)} is free on the store's disk" if free is not None else ""
            return self._failed(failure("disk", f"The checkpoint of step {error.step} could not "
                                        f"be written ({error}){room}."), error)
        except MemoryError as error:
            return self._failed(failure("oom", "The trainer ran out of memory."), error)
        except ImportError as error:
            return self._failed(
                failure("dependency", f"A package the trainer needs is missing: {error}."), error)
        except Exception as error:  # anything else is a bug or an unforeseen input: say so
            text = str(error)
            if looks_like_lost_rank(text):
                return self._rank_lost(text)
            if looks_like_oom(text):
                return self._failed(failure("oom", f"The trainer ran out of memory ({text})."),
                                    error)
            return self._failed(
                failure("internal", f"Training stopped on an unexpected error: "
                        f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
                        .rstrip(": ")),
                error)
        finally:
            self.events.close()

    def _failed(self, cause: Failure, error: BaseException) -> int:
        tail = traceback.format_exception(type(error), error, error.__traceback__)
        lines = "".join(tail).strip().splitlines()[-12:]
        step = self.loop.step if self.loop is not None else self.step
        # run.json first, then the event: whoever sees the end in the events finds the record
        # already saying so.
        try:
            self._update(RunState.FAILED, failure=cause.to_dict())
        except Exception as update_error:  # the event below is the record that matters
            print(f"could not update run.json: {update_error}", file=sys.stderr)
        self.events.write(ev.FAILED, iteration=step, **cause.to_dict(), traceback=lines)
        print(f"failed ({cause.cause}): {cause.message}", file=sys.stderr, flush=True)
        return EXIT_FAILED

    def _rank_lost(self, text: str) -> int:
        """Another rank of a distributed run is gone: no terminal event, so the runner records
        the run as interrupted (with the rank mlx.launch names) and a resume continues it."""
        self._warn("rank_lost", f"Another process of this distributed run stopped ({text}); "
                   "this one stops too.")
        return EXIT_RANK_LOST

    def _cancelled(self, checkpoint: dict[str, Any] | None) -> int:
        self._update(RunState.CANCELLED)
        self.events.write(ev.CANCELLED, iteration=self.step,
                          checkpoint=checkpoint["iteration"] if checkpoint else None)
        print(f"cancelled at step {self.step}", flush=True)
        return EXIT_DONE

    def _train(self, run: Run) -> int:
        errors = errors_in(run.problems())
        if errors:
            raise fail("config", errors[0].sentence)
        try:
            self.settings = Settings.load(self.store.home)
        except UserError as error:
            raise fail("config", error.message) from None
        adapters = self.store.adapters_dir(run.id)
        adapters.mkdir(exist_ok=True)
        config = run_to_mlx_config(run, adapter_path=str(adapters))
        if self.primary:
            (self.run_dir / CONFIG_FILE).write_text(dump_mlx_yaml(config), encoding="utf-8")

        from zyquo_tui.trainer import loading

        loading.check_model_folder(run)  # fail fast, before mlx is imported
        for problem in loading.check_dataset(run):
            self._warn("dataset", str(problem), file=problem.file, line=problem.line)
        import mlx_lm

        loading.import_training_libraries()  # the footprint before the model is not training's

        start_rss = resident_bytes()
        if start_rss is not None:
            self.summary["start_rss_bytes"] = start_rss
        model, tokenizer = loading.load_model(run)
        hp = run.hyperparameters
        if SETTINGS["objective"].get(hp) in ("sft", "distill"):
            train_set, val_set, sizes, train_lengths, val_lengths = loading.load_sft_data(
                run, tokenizer)
        elif SETTINGS["objective"].get(hp) == "grpo":
            train_set, val_set, sizes, train_lengths, val_lengths = loading.load_prompt_data(
                run, tokenizer)
        else:
            train_set, val_set, sizes, train_lengths, val_lengths = \
                loading.load_preference_data(run, tokenizer)
        if self.stop.requested:
            return self._cancelled(None)

        import mlx.core as mx
        import numpy as np

        self._truncation_warnings(hp, train_lengths, val_lengths)
        if sizes["valid"] and sizes["valid"] < hp.batch_size:
            val_set = []  # mlx-lm would stop at its first validation; skip it instead

        from zyquo_tui.trainer.distributed import World, record_ranks

        world = World.join()  # the other ranks of a distributed run (mlx.launch), if any
        if world.distributed:
            record_ranks(self.store, self.run_id, world)
        mx.random.seed(hp.seed)
        np.random.seed(hp.seed)
        optimizer = self._prepare_model(model, run, config, adapters)
        ready_rss = loading.ready_resident_bytes(start_rss)
        if ready_rss is not None:
            self.summary["ready_rss_bytes"] = ready_rss

        from zyquo_tui.trainer.loop import LoopHooks, TrainingLoop

        self._prepare_stopping(run, resumed_from=run.resume_from_step)
        self._prepare_samples(run, model, tokenizer, has_validation=bool(val_set))
        if hp.report_to and self.primary:
            from zyquo_tui.trainer.trackers import TrackedEvents, open_trackers

            # The run's figures to its experiment trackers too, as its events carry them.
            self.events = TrackedEvents(self.events, open_trackers(
                hp.report_to, project=hp.project_name, run_name=run.name, run_id=run.id,
                config=config, folder=self.run_dir, warn=self._warn), self._warn)
        self._prepare_evaluation(run, model, tokenizer)
        hooks = LoopHooks(self._on_train, self._on_val, self._on_checkpoint,
                          should_stop=self._between_steps, should_save=self._should_save,
                          after_step=self._after_step)
        # The settings config.yaml was written from, as they are: nothing copied by hand.
        from zyquo_tui.trainer.objectives import loss_chunk_tokens_for, objective_for

        chunk_tokens = loss_chunk_tokens_for(hp, run.method, run.model,
                                             max(train_lengths, default=None), world.size)
        from zyquo_tui.core.runs.out_of_memory import memory_limit
        from zyquo_tui.trainer.memory_limit import MemoryLimit

        loop = self.loop = TrainingLoop(model, optimizer, train_set, val_set, hp, adapters,
                                        hooks,
                                        objective_for(hp, model, run.model, chunk_tokens,
                                                      tokenizer),
                                        world=world,
                                        memory_limit=MemoryLimit(*memory_limit(
                                            hp, self.settings.memory_limit_bytes)))
        resumed_from = run.resume_from_step
        if resumed_from is not None:
            loop.restore(resumed_from)
            self.step = resumed_from
        elif run.lineage and run.lineage.get("adapter_file"):
            # A fork: a warm start from another run's weights (what mlx-lm's
            # --resume-adapter-file does); step, optimizer and data order start afresh.
            model.load_weights(run.lineage["adapter_file"], strict=False)

        from mlx.utils import tree_flatten
        from mlx_lm.utils import get_total_parameters

        trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
        # The time earlier sessions trained, so "elapsed" (runs list, run screen) adds up the
        # sessions, not the pause between a cancel and its resume.
        earlier = RunMetrics()
        earlier.ingest(ev.read_events(self.run_dir / EVENTS_FILE))
        self.summary["elapsed_before"] = earlier.seconds_to_last_event() or 0.0
        self.summary["session_started_at"] = time.time()
        self.events.write(
            ev.STARTED, pid=os.getpid(), host=socket.gethostname(),
            versions={"python": platform.python_version(), "mlx": mx.__version__,
                      "mlx_lm": mlx_lm.__version__, "zyquo_tui": __version__},
            device=str(mx.default_device()),
            parameters={"total": int(get_total_parameters(model)), "trainable": int(trainable)},
            dataset={"train": sizes["train"], "valid": sizes["valid"]},
            iters=hp.iters, resumed_from_step=resumed_from, config=config,
            loss_chunk_tokens=loop.objective.loss_chunk_tokens,
            world_size=world.size,
            # What the start's memory verdict assumed max_seq_length for: the runner makes
            # the record exact with it (core/memory/run_gate.py).
            longest_row_tokens=max(train_lengths, default=None),
        )
        self.summary["loss_chunk_tokens"] = loop.objective.loss_chunk_tokens
        if loop.objective.slicing_note:
            self._warn("loss_chunk_tokens", loop.objective.slicing_note)
        self.summary["iters"] = hp.iters
        self.summary.setdefault("started_at", time.time())
        self.summary.pop("ended_at", None)
        self._update(RunState.RUNNING, resume_from_step=None)
        if self.stop.requested:
            return self._cancelled(None)
        self.checkpoint_bytes = self._estimate_checkpoint_bytes(run)
        if self._disk_low() is not None:
            return self._stopped_for_disk(None)  # resumed before space was freed

        result = loop.run()
        if result.stopped and self.stop_cause == "disk":
            return self._stopped_for_disk(result.checkpoint)
        if result.stopped and (self.stop.requested or self.stop_reason is None):
            return self._cancelled(result.checkpoint)
        if result.stopped:  # by early stopping or divergence: the run is done
            self.summary.update(stop_reason=self.stop_reason, stop_message=self.stop_message)
            print(self.stop_message, flush=True)
        if self.early_stopping is not None and self.early_stopping.best_step is not None:
            self.summary["best_checkpoint_step"] = self.early_stopping.best_step
        if self.evaluation is not None and self.evaluation.best_by_eval:
            metrics = RunMetrics()  # the evaluations of every session, a resumed run's too
            metrics.ingest(ev.read_events(self.run_dir / EVENTS_FILE))
            best = metrics.best_checkpoint_step()
            if best is not None:
                self.summary["best_checkpoint_step"] = best
        self._update(RunState.COMPLETED)
        self.events.write(ev.COMPLETED, iteration=result.step, summary=self.summary)
        print(f"completed {result.step} steps", flush=True)
        return EXIT_DONE

    def _prepare_stopping(self, run: Run, resumed_from: int | None) -> None:
        """Early stopping from the run's settings, divergence from config.toml; a resumed
        run's rules pick up where they were (its figures up to the resumed step)."""
        hp = run.hyperparameters
        patience = SETTINGS["early_stopping_patience"].get(hp)
        if patience is not None:
            self.early_stopping = EarlyStopping(
                patience, float(SETTINGS["early_stopping_min_delta"].get(hp)))
        try:
            self.stop_on_divergence = Settings.load(self.store.home).stop_on_divergence
        except Exception as error:  # a broken config.toml must not stop training
            self._warn("settings", f"config.toml could not be read ({error}); divergence "
                       "only warns.")
        if resumed_from is None:
            return
        from zyquo_tui.core.events.metrics import RunMetrics

        metrics = RunMetrics()
        metrics.ingest(ev.read_events(self.run_dir / EVENTS_FILE))
        val, train = metrics.series["val_loss"], metrics.series["train_loss"]
        for step, loss in zip(val.steps, val.values):
            if step <= resumed_from and self.early_stopping is not None:
                self.early_stopping.observe(step, loss)
        for step, loss in zip(train.steps, train.values):
            if step <= resumed_from:
                self.divergence.observe(loss)

    def _prepare_samples(self, run: Run, model, tokenizer, has_validation: bool) -> None:
        setting = SETTINGS["sample_prompts"].get(run.hyperparameters)
        if setting is None:
            return
        if not has_validation:
            self._warn("samples", "sample_prompts is set but the run has no validation set "
                       "(valid.jsonl with at least batch_size rows): samples come with "
                       "validations, so there will be none.")
            return
        from zyquo_tui.trainer.samples import Sampler, sample_prompts

        prompts = sample_prompts(setting, Path(run.data))
        if not prompts:
            self._warn("samples", "sample_prompts found no prompts in valid.jsonl; there "
                       "will be no samples.")
            return
        self.sampler = Sampler(model, tokenizer, prompts,
                               int(SETTINGS["sample_max_tokens"].get(run.hyperparameters)))

    def _prepare_evaluation(self, run: Run, model, tokenizer) -> None:
        if not self.primary or SETTINGS["eval_every"].get(run.hyperparameters) is None:
            return
        from zyquo_tui.trainer.evaluation import InRunEvaluation
        from zyquo_tui.trainer.rewards import RewardError

        try:
            self.evaluation = InRunEvaluation.from_settings(run.hyperparameters, model,
                                                            tokenizer)
        except UserError as error:  # eval_data changed since the run was checked
            raise fail("data", error.message) from None
        except RewardError as error:
            raise fail("reward", f"The eval reward {error.name} cannot be used: {error}.") \
                from None

    def _truncation_warnings(self, hp, train_lengths, val_lengths) -> None:
        for split, lengths in (("train", train_lengths), ("valid", val_lengths)):
            longer = sum(1 for n in lengths if n > hp.max_seq_length)
            if longer:
                self._warn("truncated", f"{longer} of {len(lengths)} {split} rows are longer than "
                           f"max_seq_length ({hp.max_seq_length}) and will be cut (the longest has "
                           f"{max(lengths)} tokens).", split=split, rows=longer,
                           longest=max(lengths))

    def _prepare_model(self, model, run: Run, config: dict[str, Any], adapters: Path):
        """Adapters and optimizer as mlx-lm makes them, and adapter_config.json as it writes it."""
        from mlx_lm.lora import CONFIG_DEFAULTS
        from mlx_lm.utils import save_config

        from zyquo_tui.trainer.loading import prepare_model

        optimizer = prepare_model(model, run)
        args = {**CONFIG_DEFAULTS, **config}
        if run.method is Method.FULL:
            args["lora_parameters"] = None
        save_config(dict(args), adapters / "adapter_config.json")
        return optimizer

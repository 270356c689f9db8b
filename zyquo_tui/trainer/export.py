"""The exporter: fuse a run's adapter into its model with mlx-lm's own functions, then check it.

    python -m zyquo_tui.trainer.export JOB_FILE [--no-detach]

JOB_FILE is an export job's record ($ZYQUO_HOME/exports/ID.json), written by
core/processes/exports.py `start_export`, which starts this. It forks at once and its parent
exits (so nobody must reap it, and a closing dashboard or SSH session leaves it working), then
keeps the record current: its process, each phase, the check's figures and the end.

The steps, as `mlx_lm fuse` takes them: load the base with the adapter, `fuse()` each adapter
module, de-quantize a quantized base (`dequantize_model`), quantize when asked
(`quantize_model`), `save`. The written folder is then loaded again with `mlx_lm.load` and its
loss on the first validation rows is compared with base + adapter's (mlx-lm's `evaluate`);
a model whose loss is off by more than the tolerance (core/processes/exports.py) is removed
and the job is `rejected`: a fuse that lost the adapter (mlx-lm issue 1172) is never
delivered as good. The model is written beside the output under a hidden name and renamed
into place only after it passed. Exit status: 0 completed, 1 rejected or failed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

from zyquo_tui.core.errors import EXIT_PROBLEMS
from zyquo_tui.core.library.models import list_model_folder
from zyquo_tui.core.processes.exports import (
    CHECK_ROWS,
    COMPLETED,
    FAILED,
    REJECTED,
    ExportJob,
    check_rows_file,
    load_job,
    save_job,
    tolerance,
)
from zyquo_tui.core.system.entry_points import EXPORTER, usage
from zyquo_tui.core.system.liveness import identity

GGUF_FILE = "ggml-model-f16.gguf"  # mlx_lm fuse's default name


class Exporter:
    """One job carried out, its record kept current in the store."""

    def __init__(self, home: Path, job: ExportJob) -> None:
        self.home = home
        self.job = job
        self.staging: Path | None = None  # the hidden folder the model is written to first

    def phase(self, words: str) -> None:
        print(f"export {self.job.id}: {words}", flush=True)
        self.job.phase = words
        save_job(self.home, self.job)

    def end(self, state: str, message: str) -> int:
        self.job.state, self.job.message, self.job.ended = state, message, time.time()
        self.job.phase = state
        save_job(self.home, self.job)
        print(f"export {self.job.id}: {state}: {message}", flush=True)
        return 0 if state == COMPLETED else EXIT_PROBLEMS

    def check_rows(self, tokenizer):
        """The first validation rows, tokenized as training did (the run's mask_prompt and
        feature keys), as a dataset mlx-lm's `evaluate` takes."""
        from mlx_lm.tuner.datasets import CacheDataset, create_dataset

        from zyquo_tui.core.store.store import RunStore
        from zyquo_tui.trainer.loading import data_settings

        path = check_rows_file(Path(self.job.data))
        if path is None:
            raise RuntimeError(f"no validation rows in {self.job.data}")
        rows = []
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    rows.append(json.loads(line))
                if len(rows) == CHECK_ROWS:
                    break
        run = RunStore(self.home).get(self.job.run_id)
        return CacheDataset(create_dataset(rows, tokenizer, data_settings(run))), len(rows)

    def run(self) -> int:
        import mlx.core as mx
        from mlx_lm import load
        from mlx_lm.utils import save

        from zyquo_tui.trainer.adapted_model import AdaptedModel

        job = self.job
        self.phase("loading the model and the adapter")
        adapted = AdaptedModel(job.model, Path(job.adapters), job.step)
        rows, count = self.check_rows(adapted.tokenizer)
        self.phase("measuring base and adapter")
        adapted.use_base()
        base_loss = validation_loss(adapted.model, rows)
        adapted.use_adapter()
        adapter_loss = validation_loss(adapted.model, rows)
        self.phase("fusing")
        model, config = fuse_weights(adapted, job)
        output = Path(job.output)
        staging = self.staging = output.parent / f".{output.name}.exporting-{job.id}"
        self.phase("saving")
        save(staging, job.model, model, adapted.tokenizer, config, donate_model=True)
        del model, adapted
        gc.collect()
        mx.clear_cache()

        self.phase("checking the saved model")
        fused, _ = load(str(staging))
        fused_loss = validation_loss(fused, rows)
        allowed = tolerance(base_loss, adapter_loss, quantized=bool(job.quantize))
        difference = abs(fused_loss - adapter_loss)
        job.check = {"rows": count, "base_loss": base_loss, "adapter_loss": adapter_loss,
                     "fused_loss": fused_loss, "difference": difference, "tolerance": allowed,
                     "passed": difference <= allowed}
        if difference > allowed:
            shutil.rmtree(staging, ignore_errors=True)
            lost = " (the base's loss: the fuse lost the adapter)" \
                if abs(fused_loss - base_loss) <= allowed else ""
            advice = "export float weights (without --quantize)" if job.quantize else \
                "check the adapter and the model, and try again"
            return self.end(REJECTED, (
                f"The fused model's validation loss is {fused_loss:.4f}{lost}, but base + "
                f"adapter's is {adapter_loss:.4f} (off by {difference:.4f}, more than the "
                f"{allowed:.4f} allowed), so it was not kept; {advice}."))
        if output.is_dir():
            output.rmdir()  # an empty folder the user made for it
        os.rename(staging, output)
        if job.gguf:
            self.phase("writing GGUF")
            from mlx.utils import tree_flatten
            from mlx_lm.gguf import convert_to_gguf

            weights = dict(tree_flatten(fused.parameters()))
            convert_to_gguf(output, weights, json.loads((output / "config.json").read_text()),
                            str(output / GGUF_FILE))
        link = list_model_folder(output, self.home)
        job.listed_as = str(link) if link else None
        gguf = f" and {GGUF_FILE}" if job.gguf else ""
        return self.end(COMPLETED, (
            f"{output} written ({job.weights}{gguf}); its validation loss {fused_loss:.4f} is "
            f"{difference:.4f} from base + adapter's {adapter_loss:.4f} ({allowed:.4f} allowed; "
            f"base alone: {base_loss:.4f})."))


def validation_loss(model, rows) -> float:
    """The mean loss per trained token over `rows`, with mlx-lm's `evaluate` (one row a batch,
    so no padding enters and every model sees exactly the same tokens)."""
    from mlx_lm.tuner.trainer import evaluate

    return float(evaluate(model, rows, batch_size=1, num_batches=-1, max_seq_length=1 << 20))


def fuse_weights(adapted, job: ExportJob):
    """(model, config) with the adapter merged, in the weights the job asks for: mlx-lm's
    `fuse` of each adapter module, de-quantizing a quantized base, then `quantize_model` when
    the job quantizes (with the base's group size, when it had one)."""
    from mlx_lm.utils import dequantize_model, quantize_model

    config = dict(adapted.config)
    quantization = config.get("quantization") or {}
    quantized_base = bool(quantization)
    adapted.fuse(dequantize=True)
    model = adapted.model
    if quantized_base:
        model = dequantize_model(model)
        config.pop("quantization", None)
        config.pop("quantization_config", None)
    if job.quantize:
        model, config = quantize_model(model, config, quantization.get("group_size"),
                                       job.quantize)
    return model, config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=usage(EXPORTER), description=__doc__.splitlines()[0])
    parser.add_argument("job_file", type=Path)
    parser.add_argument("--no-detach", action="store_true")
    args = parser.parse_args(argv)
    if not args.no_detach and os.fork() > 0:
        os._exit(0)  # our starter reaps this parent at once; the child is nobody's to wait for
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # an SSH session ending must not stop us
    home = args.job_file.resolve().parent.parent
    job = load_job(home, args.job_file.stem)
    job.process = identity(os.getpid())
    save_job(home, job)
    exporter = Exporter(home, job)
    try:
        return exporter.run()
    except Exception as error:  # mlx-lm raises many kinds; the record must say it ended
        traceback.print_exc()
        if exporter.staging is not None:
            shutil.rmtree(exporter.staging, ignore_errors=True)
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        return exporter.end(FAILED, f"The export failed while {job.phase}: {text}.")


if __name__ == "__main__":
    sys.exit(main())

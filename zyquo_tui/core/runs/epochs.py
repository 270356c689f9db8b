"""Epochs as iterations: how many batches one pass over train.jsonl is, in mlx-lm's order.

mlx-lm's batch iterator (mlx_lm.tuner.trainer.iterate_batches, repeated line for line by
trainer/batches.py) sorts the training rows by CacheDataset.itemlen and cuts them into whole
batches of batch_size rows, `range(0, rows - batch_size + 1, batch_size)`; each epoch it walks
every batch once, in a new random order. So:

- one epoch is `rows // batch_size` iterations (one batch an iteration: gradient accumulation
  sums iterations, it does not take more batches per iteration), and N epochs are N times that:
  each batch, and so each row in it, is trained exactly N times;
- the `rows % batch_size` rows that come last in that order fill no batch, and mlx-lm never
  trains them, in any epoch. (itemlen is the length of the raw row, which for a JSON row is
  its number of keys: rows with as many keys keep train.jsonl's order, so these are its last
  rows.) A run by epochs says so (a warning), with the batch sizes that leave no row out;
- a distributed run splits each batch across its ranks (rank r of n takes the batch's rows r,
  r + n, ...): batch_size is the whole run's, and the world size changes nothing here.

mlx-lm-lora counts an epoch as ceil(rows / batch_size) iterations with the same iterator, which
makes a partial extra pass (a few batches of the next epoch trained once more); a run here
trains whole passes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpochPlan:
    """The batches one epoch of a dataset makes at a batch size."""

    train_rows: int
    batch_size: int
    # Iterations each batch trains: 1, or a grpo run's grpo_iterations (its answers reused).
    steps_per_batch: int = 1

    @property
    def batches_per_epoch(self) -> int:
        return self.train_rows // self.batch_size

    @property
    def rows_left_out(self) -> int:
        """The rows that fill no whole batch, and are never trained."""
        return self.train_rows % self.batch_size

    def per_epoch(self) -> str:
        """What one epoch is, in words: '45 batches of 5 from 225 rows'."""
        return (f"{self.batches_per_epoch} batches of {self.batch_size} from "
                f"{self.train_rows} rows")

    def iters_for(self, epochs: int) -> int:
        return epochs * self.batches_per_epoch * self.steps_per_batch

    def epochs_in(self, iters: int) -> float:
        return iters / (self.batches_per_epoch * self.steps_per_batch)

    @classmethod
    def of(cls, train_rows: object, batch_size: object, steps_per_batch: object = 1
           ) -> "EpochPlan | None":
        """The plan, or None when the rows or the batch size cannot make one (unknown, or
        fewer rows than a batch: the settings' checks say why)."""
        if not (_whole(train_rows) and _whole(batch_size)):
            return None
        if batch_size < 1 or train_rows < batch_size:  # type: ignore[operator]
            return None
        reuses = int(steps_per_batch) if _whole(steps_per_batch) and steps_per_batch >= 1 \
            else 1  # type: ignore[operator]
        return cls(int(train_rows), int(batch_size), reuses)  # type: ignore[arg-type]

    def whole_batch_sizes(self, near: int, count: int = 4) -> list[int]:
        """Batch sizes that divide the rows (no row left out), nearest to `near` first."""
        sizes = [size for size in range(1, self.train_rows + 1) if self.train_rows % size == 0]
        return sorted(sorted(sizes, key=lambda size: (abs(size - near), size))[:count])

    def left_out_sentence(self, data_name: str) -> str:
        """The warning for rows no epoch trains (call when rows_left_out > 0)."""
        left = self.rows_left_out
        rows = "row" if left == 1 else "rows"
        sizes = ", ".join(map(str, self.whole_batch_sizes(self.batch_size)))
        return (f"{data_name}: train.jsonl's {self.train_rows} rows make "
                f"{self.batches_per_epoch} whole batches of {self.batch_size} and leave "
                f"{left} {rows} over (the last in mlx-lm's order): mlx-lm trains whole "
                f"batches only, so {'it is' if left == 1 else 'they are'} never trained, in "
                f"any epoch; a batch_size that divides {self.train_rows} ({sizes}) trains "
                "every row.")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

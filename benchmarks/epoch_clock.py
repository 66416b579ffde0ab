"""A Lightning callback that measures a run's training epoch from inside ``differank.run``, for
benchmarks that time the run layer itself (``click_log_stream.py --run``). A run adds it by
override: ``+callbacks.epoch_clock._target_=epoch_clock.EpochClock
+callbacks.epoch_clock.out=PATH`` (``benchmarks/`` on ``sys.path``, as a script there has).

It records the first training epoch: wall seconds from its start to the end of its last training
batch (validation and test excluded), the batches, sessions and slots (real documents, the
masks' sum) it served, and the resident set at its start; when the fit ends it writes them to
``out`` as JSON. It lives in its own module so that a benchmark's launching process need not
import Lightning.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import measure
import pytorch_lightning as pl


class EpochClock(pl.Callback):
    """The first training epoch's seconds, batches, sessions, slots and starting RSS, written to
    ``out`` (JSON) when the fit ends."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)
        self.epoch: int | None = None  # the epoch measured (the first one seen)
        self.counts = {"batches": 0, "sessions": 0, "slots": 0}
        self.start = self.end = 0.0
        self.start_rss = 0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.epoch is None:
            self.epoch = trainer.current_epoch
            self.start_rss = measure._status_bytes("VmRSS")
            self.start = self.end = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch != self.epoch:
            return
        self.counts["batches"] += 1
        self.counts["sessions"] += len(batch["qid"])
        self.counts["slots"] += int(batch["mask"].sum())
        self.end = time.perf_counter()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        measured = {**self.counts, "seconds": self.end - self.start, "start_rss": self.start_rss}
        self.out.write_text(json.dumps(measured))

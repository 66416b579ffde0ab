"""What the data side and Lightning add to a training epoch: one epoch of ``LetorDataModule``'s
training loader plus the model+loss steps, against the same steps on the same batches already
in memory; then the epoch through ``Trainer.fit`` as ``train.py`` builds it.

    python benchmarks/epoch_overhead.py --rounds 5 --out benchmarks/results/epoch_overhead.md
    python benchmarks/epoch_overhead.py --tiny         # smoke run (seconds)

The set is benchmarks/data_path.py's MSLR-WEB30K-shaped LETOR text at ``--fraction`` (1/8:
2,365 training queries, 136 features), read once so that the cache is warm. The model is
``model=linear loss=domination`` (the :class:`RankingModule` train.py builds, Adam), batch size
32. Batches come from the one builder (``SplitTensors.batch``, a torch gather). Every loader
row is measured in the same run, in interleaved rounds (``--rounds``; the fastest round of each
figure is reported):

* build: iterating the loader alone (every batch of one epoch);
* steps: forward + loss + backward + Adam step on that epoch's batches, built beforehand;
* epoch: the loader and the steps together, as training runs them;
* ratio = epoch / steps (the target is <= 1.25).

The loader rows: train.py's (torch's ``DataLoader``, ``num_workers=0``); the dataset's batches
without a DataLoader; ``data.num_workers=1`` (one persistent worker process builds the batches:
its CPU time is not this process's, so compare wall times); and two variants of the builder that
show what its choices are worth: a per-row gather instead of one block copy per list, and
padding to the batch's longest list instead of the static lengths.

The last rows run the epoch through Lightning's ``Trainer.fit`` (its own loop, public API
only), timed from the training epoch's start to its end or to the start of its validation (the
second epoch: the first pays one-off set-up), against the same steps:

* as ``train.py`` builds it: ``make_trainer`` on ``conf/train.yaml``'s trainer, callbacks and
  loggers (checkpoints, early stopping, console, progress bar, the guards, requeue, learning
  rate monitor, CSV and TensorBoard; validation cut to one batch, outside the timing), with
  ``data.num_workers`` 0 (the default) or 1;
* a bare ``Trainer`` (no callbacks, loggers, progress bar or validation);
* the bare ``Trainer`` on the epoch's batches built beforehand: the loop without the loader.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import measure
import torch
from data_path import write_set

BATCH_SIZE = 32
TRAIN_PY_LOADER = "DataLoader, num_workers=0 (train.py's loader)"
ONE_WORKER = "DataLoader, num_workers=1, persistent worker"


@contextlib.contextmanager
def pad_to_longest():
    """Dynamic padding (L = the batch's longest list) instead of the static lengths."""
    from differank.datamodules import split_tensors

    rule = split_tensors.padded_length
    split_tensors.padded_length = lambda longest, cap: longest
    try:
        yield
    finally:
        split_tensors.padded_length = rule


@contextlib.contextmanager
def per_row_gather(dm):
    """The training split's lists gathered row by row (the path of a split whose rows are not
    in query order) instead of one block copy per list."""
    split = dm.dataset("train").tensors
    in_order, split._rows_in_order = split._rows_in_order, False
    split._host_rows = split.rows.numpy()
    try:
        yield
    finally:
        split._rows_in_order, split._host_rows = in_order, None


def approaches(dm, dm_one_worker):
    """name -> (a function giving one epoch's batch iterator, a context to run it in)."""
    host = dm.dataset("train")
    loader = dm.train_dataloader()
    worker_loader = dm_one_worker.train_dataloader()
    sampler = loader.batch_sampler

    def first_epoch(loader):
        """Every row serves the batches of epoch 0 (the same queries)."""

        def epoch():
            loader.batch_sampler.set_epoch(0)
            return iter(loader)

        return epoch

    def without_loader():
        sampler.set_epoch(0)
        return (host.__getitems__(keys) for keys in sampler)

    return {
        TRAIN_PY_LOADER: (first_epoch(loader), contextlib.nullcontext),
        "no DataLoader (the dataset's batches directly)": (without_loader, contextlib.nullcontext),
        ONE_WORKER: (first_epoch(worker_loader), contextlib.nullcontext),
        "num_workers=0, a per-row gather instead of a block copy per list": (
            first_epoch(loader),
            lambda: per_row_gather(dm),
        ),
        "num_workers=0, padded to the longest list instead of the static lengths": (
            first_epoch(loader),
            pad_to_longest,
        ),
    }


def make_model(n_features: int):
    """``model=linear loss=domination`` with Adam (lr 0.01), seeded: the module and optimizer"""
    from differank.losses.domination import DominationLoss
    from differank.rankers.scorers.linear import LinearRanker
    from differank.rankers.training.module import RankingModule

    torch.manual_seed(0)
    module = RankingModule(
        LinearRanker,
        DominationLoss(),
        lambda params: torch.optim.Adam(params, lr=0.01),
        n_features=n_features,
    )
    return module, module.configure_optimizers()


def step(module, optimizer, batch) -> None:
    loss = module.batch_loss(batch) + module.penalty()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


class Clock:
    """Process CPU seconds (what this process spent, whatever else runs on the shared machine;
    with one torch thread, the wall time of an idle machine) and wall seconds."""

    def __enter__(self):
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu, self.wall = time.process_time() - self.cpu, time.perf_counter() - self.wall


def measure_approach(epoch, module, optimizer) -> dict:
    with Clock() as build:
        batches = list(epoch())
    with Clock() as steps:
        for batch in batches:
            step(module, optimizer, batch)
    slots = sum(b["mask"].numel() for b in batches) / sum(int(b["mask"].sum()) for b in batches)
    shapes = len({b["features"].shape[1] for b in batches})
    batches.clear()
    with Clock() as together:
        for batch in epoch():
            step(module, optimizer, batch)
    row = {"padding": slots, "L": shapes}
    for name, clock in (("build", build), ("steps", steps), ("epoch", together)):
        row.update({name: clock.cpu, f"{name} wall": clock.wall})
    return row


def deterministic_steps(epoch, module, optimizer) -> dict:
    """The steps on ``epoch``'s batches with torch's deterministic kernels, as train.py's
    trainer runs them (``trainer.deterministic=true``, conf/trainer/default.yaml, without the
    NaN fill of new memory: ``make_trainer`` turns it off)."""
    batches = list(epoch())
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        with Clock() as steps:
            for batch in batches:
                step(module, optimizer, batch)
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    return {"steps": steps.cpu, "steps wall": steps.wall}


class InMemory:
    """An epoch's batches, built beforehand, as a training loader for ``Trainer.fit``."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def bare_trainer(callbacks, run_dir: Path):
    import pytorch_lightning as pl

    return pl.Trainer(
        default_root_dir=run_dir,
        max_epochs=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=callbacks,
    )


def train_py_trainer(callbacks, run_dir: Path):
    """``make_trainer`` of ``train.py`` (conf/train.yaml's trainer, callbacks and loggers) with
    ``run_dir`` as the run directory."""
    from differank.rankers.run.runs import compose_config
    from differank.rankers.run.trainer_tasks import make_trainer

    overrides = [
        "trainer.max_epochs=2",
        "trainer.accelerator=cpu",
        "+trainer.limit_val_batches=1",
        "+trainer.num_sanity_val_steps=0",
    ]
    cfg = compose_config(overrides, run_dir=run_dir)
    trainer = make_trainer(cfg)
    trainer.callbacks[:0] = callbacks
    return trainer


def lightning_epoch(dm, module, make_trainer, batches=None) -> dict:
    """The second epoch's times through ``make_trainer(callbacks).fit``: the data module's
    loaders, or ``batches`` (already in memory) as the training loader."""
    import pytorch_lightning as pl

    times = []

    class EpochTimer(pl.Callback):
        """From the training epoch's start to its end or its validation's start."""

        def on_train_epoch_start(self, trainer, pl_module):
            self.clock = Clock().__enter__()

        def on_validation_start(self, trainer, pl_module):
            if getattr(self, "clock", None) is not None and not trainer.sanity_checking:
                self.clock.__exit__()
                times.append(
                    {
                        "epoch": self.clock.cpu,
                        "epoch wall": self.clock.wall,
                        # train.py's trainer.deterministic=true turns these kernels on
                        "deterministic": torch.are_deterministic_algorithms_enabled(),
                    }
                )
                self.clock = None

        on_train_epoch_end = on_validation_start

    with tempfile.TemporaryDirectory() as run_dir:  # checkpoints and logs of train.py's
        trainer = make_trainer([EpochTimer()], Path(run_dir))
        if batches is None:
            trainer.fit(module, datamodule=dm)
        else:
            trainer.fit(module, train_dataloaders=InMemory(batches))
    torch.use_deterministic_algorithms(False)  # what train.py's trainer set, for the next rows
    return times[-1]


def lightning_rows(dm, dm_one_worker, tries: int = 2) -> dict[str, dict]:
    """name -> the fastest of ``tries`` second epochs, the runs interleaved."""
    runs = {  # name -> (trainer, data module, or None: the batches already in memory)
        "`Trainer.fit` as train.py builds it (callbacks, loggers), num_workers=0": (
            train_py_trainer,
            dm,
        ),
        "the same, data.num_workers=1 (persistent worker)": (train_py_trainer, dm_one_worker),
        "bare `Trainer.fit` (no callbacks, loggers or validation), num_workers=0": (
            bare_trainer,
            dm,
        ),
        "bare `Trainer.fit` on the batches already in memory (no loader)": (bare_trainer, None),
    }
    rows: dict[str, list[dict]] = {name: [] for name in runs}
    for _ in range(tries):
        for name, (trainer, datamodule) in runs.items():
            batches = None if datamodule else list(dm.train_dataloader())
            module = make_model(dm.n_features)[0]
            rows[name].append(lightning_epoch(datamodule or dm, module, trainer, batches))
    return {name: {k: min(t[k] for t in tries) for k in tries[0]} for name, tries in rows.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fraction", type=float, default=0.125)
    parser.add_argument("--tiny", action="store_true", help="smoke mode: fraction 0.002")
    parser.add_argument("--data", type=Path, help="where the text goes (default /tmp/...)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from differank.datamodules.letor import LetorDataModule

    torch.set_num_threads(args.threads)
    fraction = 0.002 if args.tiny else args.fraction
    data = args.data or Path(f"/tmp/differank-mslr-{fraction:g}")
    info = write_set(data, fraction, seed=0)
    dm = LetorDataModule(data, batch_size=BATCH_SIZE, cache_dir=data / "cache")
    dm.setup()  # parses once (cold) or loads the cache; the rounds below run warm
    dm_one_worker = LetorDataModule(
        data, batch_size=BATCH_SIZE, cache_dir=data / "cache", num_workers=1
    )
    dm_one_worker.setup()
    module, optimizer = make_model(dm.n_features)
    runs = approaches(dm, dm_one_worker)
    rows: dict[str, list[dict]] = {name: [] for name in runs}
    deterministic = []
    for _ in range(args.rounds):
        for name, (epoch, context) in runs.items():
            with context():
                rows[name].append(measure_approach(epoch, module, optimizer))
        deterministic.append(deterministic_steps(runs[TRAIN_PY_LOADER][0], module, optimizer))
    best = {name: {k: min(r[k] for r in tries) for k in tries[0]} for name, tries in rows.items()}
    deterministic_best = {k: min(r[k] for r in deterministic) for k in deterministic[0]}
    with_lightning = lightning_rows(dm, dm_one_worker, tries=args.rounds)
    train_py = next(iter(with_lightning.values()))
    default = best[TRAIN_PY_LOADER]
    n_batches = len(dm.train_dataloader())
    lines = [
        f"MSLR-WEB30K-shaped set at fraction {fraction:g} (benchmarks/data_path.py's text, warm "
        f"cache): {len(dm.dataset('train'))} training queries, {dm.num_rows('train'):,} rows, "
        f"{info['features']} features; {n_batches} batches of {BATCH_SIZE} queries; "
        f"model=linear loss=domination (Adam); {torch.get_num_threads()} torch thread(s); "
        f"fastest of {args.rounds} interleaved rounds. Seconds are this process's CPU time "
        "(wall time in brackets: the machine is shared, so wall times vary with the others' load).",
        "",
        "| batches formed by | build s | steps s (batches in memory) | epoch s (loader + steps) "
        "| epoch / steps CPU (wall) | padded / real slots | distinct L |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def ratios(epoch, steps):
        cpu = epoch["epoch"] / steps["steps"]
        return f"{cpu:.2f}x ({epoch['epoch wall'] / steps['steps wall']:.2f}x)"

    def cell(row, key):
        return f"{row[key]:.3f} ({row[key + ' wall']:.3f})"

    for name, row in best.items():
        lines.append(
            f"| {name} | {cell(row, 'build')} | {cell(row, 'steps')} | {cell(row, 'epoch')} | "
            f"{ratios(row, row)} | {row['padding']:.2f} | {row['L']} |"
        )
    for name, row in with_lightning.items():
        steps = deterministic_best if row["deterministic"] else default
        marker = " (deterministic kernels)" if row["deterministic"] else ""
        lines.append(
            f"| {name} | - | {cell(steps, 'steps')}{marker} | {cell(row, 'epoch')} | "
            f"{ratios(row, steps)} | - | - |"
        )
    lines += [
        "",
        "Steps: train.py's trainer runs torch's deterministic kernels (`trainer.deterministic="
        "true`), so its rows are measured against the same steps with those kernels; against "
        f"the default kernels its epoch is {ratios(train_py, default)}.",
        "",
        "Target: epoch <= 1.25 x steps. Through train.py's trainer: "
        f"{ratios(train_py, deterministic_best)}; the loader alone: {ratios(default, default)}, "
        "CPU time (wall time). With `num_workers=1` the batches are built in the worker "
        "process, whose CPU time this process does not count: compare those rows by wall time "
        f"(loader alone {ratios(best[ONE_WORKER], best[ONE_WORKER])}).",
    ]
    measure.publish("\n".join(lines), args.out, "cpu")


if __name__ == "__main__":
    main()

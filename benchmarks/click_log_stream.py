"""Streaming a synthetic Parquet click log through one epoch of reading and batching
(``clicks=parquet_log``'s training loader, ``datamodules/clicks/stream.py``) and, with
``--run``, through one epoch of ``differank.run`` (what ``python train.py`` runs): rows per
second and peak memory at several log lengths, to show the peak flat in the number of rows.

Each length is one synthetic log under ``--folder`` (default ``/tmp``), written by
``ClickLogWriter`` in a worker process (sessions of 10 documents, row groups of 65,536 rows, a
``doc_key`` column into a feature table of 4,096 documents × 46 features, a propensity
column), streamed in a fresh process, then deleted. The streaming process reads every row group
(every value checked), looks the features up and builds every click batch of 256 sessions
(``ClickLogStream`` with its epoch's shuffled order, one process, no data-loader workers);
``--train`` also runs a linear ranker's forward and backward pass with the naive softmax loss
on each batch. Peak RSS is the streaming process' ``ru_maxrss`` (everything: interpreter,
torch, pyarrow, the feature table); "above start" is that peak minus the resident set just
before the epoch (after the imports and the log's footer are read). Seconds are wall time.

``--run`` also trains one epoch on each log through ``differank.run`` in another fresh process:
``RUN`` below with ``clicks.log`` and ``clicks.feature_table`` (the synthetic data's 46
features match the log's; its small validation and test splits keep them cheap), Lightning's own
loop, ``StreamingClickDataModule``, every row served once (checked). The training epoch is
timed inside the run by ``epoch_clock.EpochClock`` (added as a callback by override), from its
start to its last batch's end; the whole call is timed too; peak RSS is that process'
``ru_maxrss``. The run's folder is made under ``--folder`` and deleted afterwards.

    nice -n 10 python benchmarks/click_log_stream.py --rows 1000000 10000000 100000000 \\
        --train --run --out benchmarks/results/click_log_stream.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import measure
from measure import mib

SESSION_LENGTH = 10
ROW_GROUP_ROWS = 65_536
DOCUMENTS, FEATURES = 4_096, 46
BATCH_SIZE = 256
# --run: train.py's overrides besides the log and its table: the synthetic data's 46 features
# (FEATURES), small validation and test splits (cheap next to the epoch), one epoch
RUN = [
    "data=synthetic",
    "data.n_train_queries=40",
    "data.n_val_queries=20",
    "data.n_test_queries=20",
    f"data.batch_size={BATCH_SIZE}",
    "clicks=parquet_log",
    "ultr=naive",
    "loss=softmax",
    "trainer.max_epochs=1",
    "logger=csv",
    "quiet=true",
]


def write_worker(path: Path, rows: int) -> dict:
    """The synthetic log of ``rows`` rows at ``path`` and its feature table beside it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from differank.datamodules.clicks.parquet_log import ClickLogWriter

    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "doc_key": pa.array(np.arange(DOCUMENTS, dtype=np.int64)),
            "features": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.normal(size=DOCUMENTS * FEATURES).astype(np.float32)), FEATURES
            ),
        }
    )
    pq.write_table(table, path.with_suffix(".table.parquet"))
    sessions_per_group = ROW_GROUP_ROWS // SESSION_LENGTH
    start = time.perf_counter()
    with ClickLogWriter(path, "doc_key", with_propensity=True, overwrite=True) as writer:
        first = 0
        while first * SESSION_LENGTH < rows:
            count = min(sessions_per_group, -(-(rows - first * SESSION_LENGTH) // SESSION_LENGTH))
            n = count * SESSION_LENGTH
            session = np.repeat(np.arange(first, first + count), SESSION_LENGTH)
            position = np.tile(np.arange(1, SESSION_LENGTH + 1), count)
            writer.write(
                session=session,
                qid=session % 100_000,
                position=position,
                click=(rng.random(n) < 0.3 / position).astype(np.uint8),
                propensity=(1.0 / position).astype(np.float32),
                doc_key=rng.integers(0, DOCUMENTS, n),
            )
            first += count
    return {
        "rows": writer.rows,
        "bytes": path.stat().st_size,
        "seconds": time.perf_counter() - start,
    }


def stream_worker(path: Path, train: bool) -> dict:
    """One epoch of ``path`` through ``ClickLogStream`` in this fresh process."""
    import numpy as np
    import torch

    from differank.datamodules.clicks.parquet_log import FeatureTable, ParquetClickLog
    from differank.datamodules.clicks.stream import ClickLogStream

    torch.set_num_threads(1)
    log = ParquetClickLog(path)
    table = FeatureTable.read(path.with_suffix(".table.parquet"))

    def features(rows):
        return table.lookup(rows.doc_key, rows, log.path)

    stream = ClickLogStream(log, features, BATCH_SIZE, seed=0)
    model = torch.nn.Linear(FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    counts = {"sessions": 0, "batches": 0, "slots": 0}
    start_rss = measure._status_bytes("VmRSS")
    start = time.perf_counter()
    for batch in stream:
        counts["batches"] += 1
        counts["sessions"] += len(batch["qid"])
        counts["slots"] += int(batch["mask"].sum())
        if train:
            scores = model(batch["features"]).squeeze(-1).masked_fill(~batch["mask"], -1e9)
            loss = -(batch["clicks"] * torch.log_softmax(scores, dim=1)).sum() / len(scores)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    seconds = time.perf_counter() - start
    assert counts["slots"] == log.rows, (counts, log.rows)  # every row served once
    return {
        **counts,
        "rows": log.rows,
        "row_groups": log.row_groups,
        "seconds": seconds,
        "peak_rss": measure.max_rss_bytes(),
        "start_rss": start_rss,
        "numpy": np.__version__,
    }


def run_worker(path: Path, folder: Path) -> dict:
    """One epoch of ``path`` through ``differank.run`` (``RUN``) in this fresh process, its
    training epoch measured by :class:`epoch_clock.EpochClock`; the run's folder, made under
    ``folder``, is removed afterwards."""
    import shutil
    import tempfile

    import torch

    import differank
    from differank.datamodules.clicks.parquet_log import ParquetClickLog

    torch.set_num_threads(1)
    click_log = ParquetClickLog(path)
    run_dir = Path(tempfile.mkdtemp(prefix="differank-click-run-", dir=folder))
    clock = run_dir / "epoch_clock.json"
    overrides = [
        *RUN,
        f"clicks.log={path}",
        f"clicks.feature_table={path.with_suffix('.table.parquet')}",
        "+callbacks.epoch_clock._target_=epoch_clock.EpochClock",
        f"+callbacks.epoch_clock.out={clock}",
    ]
    try:
        start = time.perf_counter()
        differank.run(overrides, output_dir=run_dir / "run")
        run_seconds = time.perf_counter() - start
        epoch = json.loads(clock.read_text())
    finally:
        shutil.rmtree(run_dir)
    assert epoch["slots"] == click_log.rows, (epoch, click_log.rows)  # every row served once
    return {
        **epoch,
        "rows": click_log.rows,
        "row_groups": click_log.row_groups,
        "run_seconds": run_seconds,
        "peak_rss": measure.max_rss_bytes(),
    }


def _flat_line(results: list[dict], peak: str, why: str) -> list[str]:
    """The sentence comparing the peaks of the shortest and the longest log."""
    if len(results) < 2:
        return []
    peaks = [r[peak] for r in results]
    first, last = results[0]["rows"], results[-1]["rows"]
    return [
        "",
        f"Peak RSS from {first:,} to {last:,} rows ({last / first:.0f}x the rows): "
        f"{mib(min(peaks))} to {mib(max(peaks))} MiB ({max(peaks) / min(peaks):.2f}x): {why}",
    ]


def report(results: list[dict], command: str, train: bool, run: bool) -> str:
    what = "reading, batching and a linear training step" if train else "reading and batching"
    lines = [
        "# Streaming a Parquet click log (clicks=parquet_log)",
        "",
        f"Synthetic Parquet click logs: sessions of {SESSION_LENGTH} documents, row groups of "
        f"{ROW_GROUP_ROWS:,} rows, a doc_key column into a feature table of {DOCUMENTS:,} "
        f"documents x {FEATURES} features, batches of {BATCH_SIZE} sessions, one process (no "
        "data-loader workers), every row group's values checked as it is read. Peak RSS: the "
        "measured process' whole peak resident set (interpreter, torch, pyarrow, feature table); "
        "above start: that peak minus the resident set just before the epoch. Wall time, on a "
        "machine shared with other work.",
        "",
        f"Command: `{command}`",
        "",
        f"## The stream alone: one epoch of {what}",
        "",
        "| rows | row groups | file MiB | write s | epoch s | rows/s | peak RSS MiB | "
        "above start MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['rows']:,} | {r['row_groups']:,} | {mib(r['bytes'])} | "
            f"{r['write_seconds']:.1f} | {r['seconds']:.1f} | {r['rows'] / r['seconds']:,.0f} | "
            f"{mib(r['peak_rss'])} | {mib(r['peak_rss'] - r['start_rss'])} |"
        )
    lines += _flat_line(
        results,
        "peak_rss",
        "flat in the number of rows, as the stream holds one row group at a time (two while "
        "a batch takes sessions from both) and the batch it fills.",
    )
    if not run:
        return "\n".join(lines)
    lines += [
        "",
        "## Through the run layer: one epoch of `differank.run`",
        "",
        "What `python train.py` runs, in a fresh process per log: `" + " ".join(RUN) + " "
        "clicks.log=LOG clicks.feature_table=TABLE` (Lightning's own loop, "
        "`StreamingClickDataModule`, the linear ranker, the naive estimator: clicks as the "
        "softmax loss' labels, validation and test on the small synthetic data's true labels, "
        "the checkpoints). Epoch s: the training epoch, from its start to its last batch's end "
        "(validation and test excluded), measured inside the run by a callback "
        "(`benchmarks/epoch_clock.py`); rows/s from it. Run s: the whole `differank.run` call "
        "(data set-up, the epoch, validation, test, checkpoints). Peak RSS: the run's process, "
        "everything included; above start: that peak minus the resident set at the epoch's "
        "start.",
        "",
        "| rows | batches | epoch s | rows/s | run s | peak RSS MiB | above start MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        t = r["run"]
        lines.append(
            f"| {t['rows']:,} | {t['batches']:,} | {t['seconds']:.1f} | "
            f"{t['rows'] / t['seconds']:,.0f} | {t['run_seconds']:.1f} | {mib(t['peak_rss'])} | "
            f"{mib(t['peak_rss'] - t['start_rss'])} |"
        )
    lines += _flat_line(
        [r["run"] for r in results],
        "peak_rss",
        "flat in the number of rows: nothing in the run path (the data loader, Lightning's "
        "loop, the loggers, the callbacks) holds the log or grows with its length.",
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--folder", type=Path, default=Path("/tmp"))
    parser.add_argument("--train", action="store_true", help="also a linear training step")
    parser.add_argument(
        "--run", action="store_true", help="also one epoch through differank.run (train.py)"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", choices=("write", "stream", "run"), help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "write":
        print(json.dumps(write_worker(args.path, args.rows[0])))
        return
    if args.worker == "stream":
        print(json.dumps(stream_worker(args.path, args.train)))
        return
    if args.worker == "run":
        print(json.dumps(run_worker(args.path, args.folder)))
        return
    results = []
    for rows in args.rows:
        path = args.folder / f"differank-click-log-{rows}.parquet"
        try:
            written = measure.worker_json(
                __file__, ["--worker", "write", "--path", str(path), "--rows", str(rows)]
            )
            print(f"{rows:,} rows written: {written}", flush=True)
            train = ["--train"] if args.train else []
            streamed = measure.worker_json(
                __file__, ["--worker", "stream", "--path", str(path), *train]
            )
            print(f"{rows:,} rows streamed: {streamed}", flush=True)
            if args.run:
                run = ["--folder", str(args.folder)]
                streamed["run"] = measure.worker_json(
                    __file__, ["--worker", "run", "--path", str(path), *run]
                )
                print(f"{rows:,} rows trained by differank.run: {streamed['run']}", flush=True)
        finally:
            path.unlink(missing_ok=True)
            path.with_suffix(".table.parquet").unlink(missing_ok=True)
        results.append({**streamed, "bytes": written["bytes"], "write_seconds": written["seconds"]})
    shown = [
        "python",
        "benchmarks/click_log_stream.py",
        *(argv if argv is not None else sys.argv[1:]),
    ]
    measure.publish(report(results, " ".join(shown), args.train, args.run), args.out)


if __name__ == "__main__":
    main()

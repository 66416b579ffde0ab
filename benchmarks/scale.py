"""One training epoch per loss on an MSLR-WEB30K-shaped synthetic set: time and peak RSS.

    OMP_NUM_THREADS=1 python benchmarks/scale.py --out benchmarks/results/scale.md
    python benchmarks/scale.py --tiny                 # smoke run (small set, seconds)

The set is :func:`differank.datamodules.mslr_synthetic.generate_mslr` at full size (31,531 queries,
3,771,125 documents, 136 float32 features = 2.05 GB, labels 0-4, lists up to 1,251), generated
in memory, so this measures the losses, not the data path (text parsing, cache, normalisation:
``benchmarks/data_path.py`` runs ``train.py`` on the same shape written as LETOR text). Each
loss runs in its own process (so its peak RSS is its own, data included): generate, then one
epoch of Adam steps on batches of 64 queries (the ranker and loss as in
``benchmarks/throughput.py``), with the pair budget in ``BUDGETS``: a ``max_list`` cap
(training subsample keeping relevant documents,
``differank.datamodules.query_batches.subsample_query``) for losses whose memory grows as B·L², full
lists for the O(L) / O(L log L) ones, sampled pairs or orders where the loss has them. Epoch time is
the worker's CPU time (one thread, ``time.process_time``: what an idle core takes, even on a shared
machine; wall time is in the JSON). An epoch that passes ``--time-limit`` CPU seconds is stopped and
its time extrapolated from the queries done (marked in the table).

The physical bound beside each epoch is the feature bytes the epoch must move (documents
served × 136 × 4 B) divided by the measured memory copy bandwidth (``numpy.copyto`` of 256 MiB,
best of 5, counted as bytes copied per second): no epoch that reads its features once can be
faster. Peak RSS is ``ru_maxrss`` of the worker process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import measure
import numpy as np

# loss name (as in throughput.VARIANTS) -> (max_list cap or None, extra loss kwargs)
BUDGETS: dict[str, tuple[int | None, dict]] = {
    "ranknet": (256, {}),
    "listnet": (None, {}),
    "domination": (None, {}),
    "hinge (NDCG@10, dp)": (None, {}),
    "convex (ndcg, 1000 samples)": (256, {}),
    "convex (auc, pair space)": (256, {}),
    "cone (256 pairs/query)": (None, {}),
    "listnet + transformer": (None, {}),
}
# rows that train a list-aware scorer instead of the variant's own: row -> (variant, ranker)
TRANSFORMER_ROWS = {"listnet + transformer": "listnet"}
TINY = {"n_queries": 40, "n_docs": 1200, "max_list": 60}


def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes copied per second by ``numpy.copyto`` (best of ``repeats``)."""
    source = np.ones(megabytes * 2**20 // 4, dtype=np.float32)
    target = np.empty_like(source)
    copy = lambda: np.copyto(target, source)  # noqa: E731
    return source.nbytes / measure.best_seconds(copy, repeats, time.perf_counter, warmup=False)


def worker(name: str, shape: dict, batch_size: int, time_limit: float, seed: int) -> dict:
    """Generate the set, train one epoch of ``name``; the row as a dict (run in a subprocess)."""
    import torch
    from throughput import load_variants, make_ranker

    from differank.datamodules.mslr_synthetic import generate_mslr, iterate_batches

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    variant_name = TRANSFORMER_ROWS.get(name, name)
    ((variant, cls),) = [(v, c) for v, c in load_variants(None) if v.name == variant_name]
    max_list, extra = BUDGETS[name]
    start = time.perf_counter()
    data = generate_mslr(**shape, seed=seed)
    generate_seconds = time.perf_counter() - start
    if name in TRANSFORMER_ROWS:  # model=transformer's defaults: attention over the whole list
        from differank.rankers.scorers.transformer import TransformerRanker

        ranker = TransformerRanker(data.features.shape[1])
    else:
        ranker = make_ranker(variant, data.features.shape[1])
    loss = cls(**{**variant.kwargs, **extra})
    optimizer = torch.optim.Adam(ranker.parameters(), lr=1e-3)
    queries = docs = batches = 0
    start, wall = time.process_time(), time.perf_counter()
    for batch in iterate_batches(data, batch_size, max_list=max_list, seed=seed):
        optimizer.zero_grad(set_to_none=True)
        target = (
            ranker.loss_target(batch["features"], batch["mask"])
            if ranker.uses_mask
            else ranker.loss_target(batch["features"])
        )
        value = loss(target, batch["labels"], batch["mask"], **ranker.loss_inputs())
        value.backward()
        optimizer.step()
        ranker.constrain()
        queries += batch["mask"].shape[0]
        docs += int(batch["mask"].sum())
        batches += 1
        if time.process_time() - start > time_limit:
            break
    seconds, wall = time.process_time() - start, time.perf_counter() - wall
    served = int(np.minimum(data.lengths, max_list or data.lengths.max()).sum())
    return {
        "loss": name,
        "max_list": max_list,
        "extra": extra,
        "batch_size": batch_size,
        "queries": queries,
        "total_queries": data.n_queries,
        "docs": docs,
        "epoch_docs": served,
        "batches": batches,
        "seconds": seconds,
        "wall_seconds": wall,
        "complete": queries == data.n_queries,
        "epoch_seconds": seconds * data.n_queries / max(queries, 1),
        "generate_seconds": generate_seconds,
        "data_bytes": data.nbytes,
        "n_features": data.features.shape[1],
        "total_docs": data.features.shape[0],
        "peak_rss": measure.max_rss_bytes(),
        "threads": torch.get_num_threads(),
    }


def run_worker(name: str, args) -> dict:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        name,
        "--batch",
        str(args.batch),
        "--time-limit",
        str(args.time_limit),
        "--seed",
        str(args.seed),
    ] + (["--tiny"] if args.tiny else [])
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-1:])[:200]
        return {"loss": name, "error": f"exit {done.returncode}: {tail}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict], bandwidth: float, limit_gb: float) -> str:
    lines = [
        "| loss | pair budget | batches | epoch s | queries / s | peak RSS GiB | "
        f"< {limit_gb:g} GiB | bound s (bytes / bandwidth) |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['loss']} | failed: {row['error']} |")
            continue
        budget = f"max_list={row['max_list']}" if row["max_list"] else "full lists"
        if row["extra"]:
            budget += ", " + ", ".join(f"{k}={v}" for k, v in row["extra"].items())
        epoch = f"{row['epoch_seconds']:.1f}"
        if not row["complete"]:
            share = 100 * row["queries"] / row["total_queries"]
            epoch += f" (extrapolated from {share:.0f} %)"
        bound = row["epoch_docs"] * row["n_features"] * 4 / bandwidth
        peak = row["peak_rss"] / 2**30
        lines.append(
            f"| {row['loss']} | {budget} | {row['batches']} | {epoch} | "
            f"{row['total_queries'] / row['epoch_seconds']:.0f} | {peak:.2f} | "
            f"{'yes' if peak < limit_gb else 'NO'} | {bound:.3g} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--losses", nargs="*", default=list(BUDGETS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--time-limit", type=float, default=150.0, help="seconds per epoch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit-gb", type=float, default=8.0)
    parser.add_argument("--tiny", action="store_true", help="smoke mode: a small set")
    parser.add_argument("--out", type=Path, help="write the table (markdown) here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = TINY if args.tiny else {}
    if args.worker:
        print(json.dumps(worker(args.worker, shape, args.batch, args.time_limit, args.seed)))
        return

    bandwidth = copy_bandwidth(16 if args.tiny else 256)
    rows = []
    for name in args.losses:
        if name not in BUDGETS:
            parser.error(f"unknown loss {name!r}; choose from {list(BUDGETS)}")
        rows.append(run_worker(name, args))
        row = rows[-1]
        if "error" in row:
            print(f"  {name}: {row['error']}", flush=True)
        else:
            print(
                f"  {name}: epoch {row['epoch_seconds']:.1f} s, peak RSS "
                f"{row['peak_rss'] / 2**30:.2f} GiB, generate {row['generate_seconds']:.1f} s",
                flush=True,
            )
    ok = [r for r in rows if "error" not in r]
    head = ok[0] if ok else None
    parts = []
    if head:
        parts.append(
            f"MSLR-WEB30K-shaped synthetic set: {head['total_queries']:,} queries, "
            f"{head['total_docs']:,} documents, {head['n_features']} features, "
            f"{int(head['data_bytes'] / 2**20):,} MiB in memory; batch {head['batch_size']}, "
            f"{head['threads']} thread(s); copy bandwidth {bandwidth / 2**30:.1f} GiB/s; "
            f"generation {head['generate_seconds']:.1f} s.\n"
        )
    parts.append(table(rows, bandwidth, args.limit_gb))
    meta = measure.run_metadata("cpu")  # after the workers: torch stays out of their start
    parts.append(measure.metadata_line(meta))
    text = "\n".join(parts)
    print(text, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(
            json.dumps({"bandwidth": bandwidth, "rows": rows, "meta": meta}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()

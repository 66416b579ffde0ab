"""Forward+backward cost of every loss as the list length L grows, and training-epoch speed.

    python benchmarks/throughput.py                       # CPU (and CUDA when available)
    python benchmarks/throughput.py --lengths 16 64 256 --out benchmarks/results/throughput.md
    python benchmarks/throughput.py --compile --lengths 64 256 --no-epoch   # compiled vs eager
    python benchmarks/throughput.py --device cuda                            # CUDA only

For each loss that exists in ``losses/`` (missing ones are skipped with a message): one
forward+backward of ``loss(ranker.loss_target(X), labels, mask, **ranker.loss_inputs())`` with
X float32 [B=64, L, F=136] (a random linear scorer; ConeRank's basis for the cone loss), labels
0-4 in MSLR-WEB30K proportions, every list full. Reported per (loss, L): the best of a few
timed calls after a warm-up, the peak memory of one call, and the ratio to a naive form: the
same loss called query by query in a Python loop ([1, L] batches, "loop"); for the domination
loss also its dense O(L²) form (all-zero [B, L, L] margins, ``benchmarks/domination_throughput``).

Time on CPU is the process' CPU time (``time.process_time``, one thread: OMP_NUM_THREADS=1),
i.e. the seconds an idle core would take, so timings stay meaningful on a shared machine; on
CUDA it is wall time after synchronising. Peak memory on CPU is the rise of the process' peak
resident set during one call: ``VmHWM`` after resetting it by writing ``5`` to
``/proc/self/clear_refs`` (Linux), minus ``VmRSS`` before the call (tracemalloc cannot see
torch's allocations; the profiler's memory events proved incomplete). So that freed memory is
not silently reused, glibc serves every block over 64 KiB by mmap (``mallopt``) and
``malloc_trim(0)`` runs before that call: the figure is the memory the call itself touches
(repeatable to ~1 %). Timed calls run with glibc's steady-state threshold (32 MiB) instead, as
in a training loop. On CUDA it is ``torch.cuda.max_memory_allocated`` minus the allocation
before the call.

Beyond L = 1,024 only losses whose cost is bounded by sampling or by a sub-quadratic form run
(dense pairwise forms are marked "needs max_list / pair sampling"). A loss stops growing L once
one call takes more than ``--max-seconds`` or its peak is predicted to pass ``--max-gb``.

``--compile`` times, instead of the L scan, each loss eager and compiled
(``torch.compile(loss, fullgraph=True, dynamic=False, backend=--compile-backend)``, inductor
by default) on the same batch in one run: the first compiled call (compilation, wall seconds)
and the best of the timed calls of each. A loss that does not compile is listed with the error.

The epoch table times one full training epoch (Adam, the experiment's ranker) on MQ2008 fold 1's
training split (real loader, batch 32) when the data is there, else on the synthetic set.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import measure
import torch
from domination_throughput import dense

from differank.datamodules.download import data_home
from differank.datamodules.mslr_synthetic import LABEL_SHARES

ROOT = Path(__file__).resolve().parents[1]

MQ2008 = data_home() / "MQ2008"  # $LETOR_DIR/MQ2008, else the shared data folder


@dataclass
class Variant:
    """One loss setting to time. ``dense`` marks O(B·L²) memory (all pairs materialised)."""

    name: str
    module: str
    cls: str
    kwargs: dict = field(default_factory=dict)
    ranker: str = "linear"  # "linear" | "conerank"
    dense: bool = False
    complexity: str = ""
    not_compiled: str = ""  # why ``--compile`` leaves this variant out, if it does


VARIANTS = [
    Variant("ranknet", "differank.losses.ranknet", "RankNetLoss", dense=True, complexity="O(L²)"),
    Variant("listnet", "differank.losses.listnet", "ListNetLoss", complexity="O(L)"),
    Variant("domination", "differank.losses.domination", "DominationLoss", complexity="O(L log L)"),
    Variant(
        "hinge (NDCG@10, dp)",
        "differank.losses.hinge",
        "StructuredHingeLoss",
        {"k": 10},
        complexity="O(L log L + DP)",
    ),
    Variant(
        "convex (ndcg, 1000 samples)",
        "differank.losses.convex",
        "ConvexLoss",
        {"seed": 0},
        complexity="O(S·L)",
    ),
    Variant(
        "convex (auc, pair space)",
        "differank.losses.convex",
        "ConvexLoss",
        {"delta": "auc", "space": "pairs"},
        dense=True,
        complexity="O(L²)",
    ),
    Variant(
        "cone (all pairs, fista: previous default)",
        "differank.losses.cone",
        "ConeLoss",
        {"solver": "fista"},
        ranker="conerank",
        dense=True,
        complexity="O(L²·(F + K·T))",
        not_compiled="not compiled: 500 unrolled FISTA steps (an option, not the default)",
    ),
    Variant(
        "cone (all pairs, active set)",
        "differank.losses.cone",
        "ConeLoss",
        ranker="conerank",
        dense=True,
        complexity="O(L²·K²)",
    ),
    Variant(
        "cone (64 pairs/query: conf default)",
        "differank.losses.cone",
        "ConeLoss",
        {"max_pairs_per_query": 64},
        ranker="conerank",
        complexity="O(P·(F + K²))",
    ),
    Variant(
        "cone (256 pairs/query)",
        "differank.losses.cone",
        "ConeLoss",
        {"max_pairs_per_query": 256},
        ranker="conerank",
        complexity="O(P·(F + K²))",
    ),
]


def load_variants(names: list[str] | None) -> list[tuple[Variant, type]]:
    """The variants whose loss module imports; prints a message for each missing one."""
    found = []
    for variant in VARIANTS:
        if names and not any(n in variant.name for n in names):
            continue
        try:
            found.append((variant, getattr(importlib.import_module(variant.module), variant.cls)))
        except (ImportError, AttributeError) as error:
            print(f"skipping {variant.name}: {error}", flush=True)
    return found


def make_ranker(variant: Variant, n_features: int) -> torch.nn.Module:
    if variant.ranker == "conerank":
        from differank.rankers.scorers.conerank import ConeRank

        return ConeRank(n_features=n_features, n_basis=10, seed=0)
    from differank.rankers.scorers.linear import LinearRanker

    ranker = LinearRanker(n_features)
    torch.nn.init.normal_(ranker.linear.weight, std=n_features**-0.5, generator=None)
    return ranker


def make_batch(batch: int, length: int, n_features: int, device, seed: int = 0):
    """Random features, MSLR-proportioned labels 0-4, full lists."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, length, n_features, generator=g)
    cut = torch.tensor(LABEL_SHARES).cumsum(0)[:-1]
    labels = torch.bucketize(torch.rand(batch, length, generator=g), cut).float()
    mask = torch.ones(batch, length, dtype=torch.bool)
    return features.to(device), labels.to(device), mask.to(device)


M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


LIBC = _libc()


def peak_bytes(fn, device: torch.device) -> int:
    """Peak memory added by one call of ``fn`` (see the module docstring for the method)."""
    if device.type == "cuda":
        return measure.cuda_peak_bytes(fn)
    try:
        if LIBC is not None:  # every block > 64 KiB by mmap, so nothing freed is reused unseen
            LIBC.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
            LIBC.malloc_trim(0)
        return max(measure.rss_peak_bytes(fn), 0)
    except OSError:  # not Linux: no peak measurement
        fn()
        return -1
    finally:
        if LIBC is not None:  # back to glibc's steady state (its dynamic threshold's maximum)
            LIBC.mallopt(M_MMAP_THRESHOLD, 32 * 2**20)


def best_seconds(fn, device: torch.device, repeats: int) -> float:
    """The best of ``repeats`` calls (no warm-up: the peak-memory call before is one) by
    :func:`measure.device_clock`: CPU time on CPU (one thread, so the seconds an idle core would
    take, even on a shared machine), wall time after synchronising on CUDA."""
    return measure.best_seconds(fn, repeats, measure.device_clock(device), device, warmup=False)


def step_fn(loss, ranker, features, labels, mask):
    """One forward+backward, as RankingModule.batch_loss does it."""

    def step():
        ranker.zero_grad(set_to_none=True)
        value = loss(ranker.loss_target(features), labels, mask, **ranker.loss_inputs())
        value.backward()

    return step


def loop_fn(loss, ranker, features, labels, mask):
    """The naive form: the same loss, one query at a time in a Python loop."""

    def step():
        ranker.zero_grad(set_to_none=True)
        total = features.new_zeros(())
        for b in range(features.shape[0]):
            one = slice(b, b + 1)
            total = total + loss(
                ranker.loss_target(features[one]), labels[one], mask[one], **ranker.loss_inputs()
            )
        total.backward()

    return step


def dense_domination_fn(ranker, features, labels, mask):
    """Domination loss through its dense [B, L, L] margin form (the O(L²) naive)."""

    def step():
        ranker.zero_grad(set_to_none=True)
        dense(ranker(features), labels, mask).backward()

    return step


def time_lengths(variant, cls, lengths, device, args) -> list[dict]:
    rows = []
    last_peak, last_length, stop = None, None, None
    for length in lengths:
        if stop is None and variant.dense and length > 1024:
            stop = "needs max_list / pair sampling beyond 1,024"
        if stop is None and last_peak and last_peak > 0:
            growth = (length / last_length) ** (2 if variant.dense else 1)
            if last_peak * growth > args.max_gb * 2**30:
                stop = f"predicted peak > {args.max_gb} GB"
        if stop:
            rows.append({"loss": variant.name, "L": length, "skipped": stop})
            continue
        ranker = make_ranker(variant, args.features).to(device)
        loss = cls(**variant.kwargs).to(device)
        features, labels, mask = make_batch(args.batch, length, args.features, device)
        step = step_fn(loss, ranker, features, labels, mask)
        try:
            clock = measure.device_clock(device)
            measure.synchronize(device)
            start = clock()
            peak = peak_bytes(step, device)  # also the warm-up call
            measure.synchronize(device)
            first = clock() - start
            repeats = 1 if first > 2.0 else args.repeats
            seconds = best_seconds(step, device, repeats)
            row = {"loss": variant.name, "L": length, "seconds": seconds, "peak": peak}
            if length <= args.naive_max and first < args.max_seconds / 4:
                row["loop"] = best_seconds(loop_fn(loss, ranker, features, labels, mask), device, 1)
                if variant.module == "differank.losses.domination":
                    naive = dense_domination_fn(ranker, features, labels, mask)
                    row["dense"] = best_seconds(naive, device, 1)
        except (RuntimeError, MemoryError) as error:  # e.g. CUDA out of memory: stop growing L
            stop = f"failed: {type(error).__name__}"
            rows.append({"loss": variant.name, "L": length, "skipped": stop})
            continue
        rows.append(row)
        print(_row_line(row, device), flush=True)
        last_peak, last_length = peak, length
        if seconds > args.max_seconds:
            stop = f"one call > {args.max_seconds:g} s"
        del features, labels, mask, ranker, loss, step
    return rows


def compile_rows(variants, lengths, device: torch.device, args) -> list[dict]:
    """Eager vs ``torch.compile(fullgraph=True)`` forward+backward of each loss, same batch."""
    rows = []
    for variant, cls in variants:
        if variant.not_compiled:
            rows.append({"loss": variant.name, "L": lengths[0], "skipped": variant.not_compiled})
            continue
        for length in lengths:
            torch.compiler.reset()
            ranker = make_ranker(variant, args.features).to(device)
            loss = cls(**variant.kwargs).to(device)
            features, labels, mask = make_batch(args.batch, length, args.features, device)
            eager = step_fn(loss, ranker, features, labels, mask)
            program = torch.compile(
                loss, fullgraph=True, dynamic=False, backend=args.compile_backend
            )
            compiled = step_fn(program, ranker, features, labels, mask)
            row = {"loss": variant.name, "L": length}
            try:
                start = time.perf_counter()
                compiled()
                row["compile"] = time.perf_counter() - start
            except Exception as error:  # any compiler error becomes a table entry
                row["skipped"] = f"does not compile: {type(error).__name__}"
                rows.append(row)
                print(f"  {variant.name} L={length}: {row['skipped']}: {error}", flush=True)
                break
            eager()
            row["eager"] = best_seconds(eager, device, args.repeats)
            row["compiled"] = best_seconds(compiled, device, args.repeats)
            rows.append(row)
            print(
                f"  {device.type} {variant.name:<28} L={length:>5} eager "
                f"{row['eager'] * 1e3:9.2f} ms compiled {row['compiled'] * 1e3:9.2f} ms "
                f"(compile {row['compile']:.1f} s)",
                flush=True,
            )
    return rows


def compile_table(rows: list[dict], label: str, backend: str) -> str:
    lines = [
        f"### Eager vs compiled forward+backward on {label} (torch.compile fullgraph, {backend})\n",
        "| loss | L | eager ms | compiled ms | eager / compiled | first call s (compile) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['loss']} | {row['L']} | — | — | — | {row['skipped']} |")
            continue
        lines.append(
            f"| {row['loss']} | {row['L']} | {row['eager'] * 1e3:.2f} | "
            f"{row['compiled'] * 1e3:.2f} | {row['eager'] / row['compiled']:.2f}× | "
            f"{row['compile']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _row_line(row: dict, device) -> str:
    return (
        f"  {device.type} {row['loss']:<28} L={row['L']:>5} {row['seconds'] * 1e3:10.2f} ms "
        f"peak {row['peak'] / 2**20:8.1f} MiB"
    )


def throughput_table(rows: list[dict], device: str) -> str:
    lines = [
        f"| loss | L | fwd+bwd ms ({device}) | peak MiB | loop ms | loop / batched | "
        "dense / batched |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['loss']} | {row['L']} | — | — | — | — | {row['skipped']} |")
            continue
        peak = f"{row['peak'] / 2**20:.1f}" if row["peak"] >= 0 else "n/a"
        loop = f"{row['loop'] * 1e3:.1f}" if "loop" in row else "—"
        ratio = f"{row['loop'] / row['seconds']:.1f}×" if "loop" in row else "—"
        dense = f"{row['dense'] / row['seconds']:.1f}×" if "dense" in row else "—"
        lines.append(
            f"| {row['loss']} | {row['L']} | {row['seconds'] * 1e3:.2f} | {peak} | "
            f"{loop} | {ratio} | {dense} |"
        )
    return "\n".join(lines) + "\n"


def epoch_datamodule(tiny: bool):
    """MQ2008 fold 1 (batch 32) when the data is there and not ``tiny``, else the synthetic
    set (tiny: 40 training queries); returns the set-up datamodule and its name."""
    from differank.datamodules.letor import LetorDataModule
    from differank.datamodules.synthetic import SyntheticLetorDataModule

    if MQ2008.is_dir() and not tiny:
        datamodule, source = LetorDataModule(MQ2008, fold=1, batch_size=32), "MQ2008 fold 1"
    else:
        sizes = {"n_train_queries": 40, "n_val_queries": 5, "n_test_queries": 5} if tiny else {}
        datamodule, source = SyntheticLetorDataModule(batch_size=32, **sizes), "synthetic"
    datamodule.setup()
    return datamodule, source


def epoch_seconds(
    loss, ranker, datamodule, device: torch.device, repeats: int = 2
) -> tuple[int, float]:
    """Queries and seconds (the best of ``repeats`` epochs; the first also warms up) of one full
    training epoch of ``ranker`` under ``loss`` (Adam, lr 0.01, loader included)."""
    optimizer = torch.optim.Adam(ranker.parameters(), lr=0.01)
    seconds, clock = float("inf"), measure.device_clock(device)
    for _ in range(repeats):
        queries = 0
        measure.synchronize(device)
        start = clock()
        for batch in datamodule.train_dataloader():
            features, labels, mask = (batch[k].to(device) for k in ("features", "labels", "mask"))
            optimizer.zero_grad(set_to_none=True)
            value = loss(ranker.loss_target(features), labels, mask, **ranker.loss_inputs())
            value.backward()
            optimizer.step()
            ranker.constrain()
            queries += int(mask.shape[0])
        measure.synchronize(device)
        seconds = min(seconds, clock() - start)
    return queries, seconds


def epoch_rows(variants, device: torch.device, tiny: bool) -> list[dict]:
    """Queries per second of one full training epoch (Adam, batch 32)."""
    datamodule, source = epoch_datamodule(tiny)
    rows = []
    for variant, cls in variants:
        ranker = make_ranker(variant, datamodule.n_features).to(device)
        loss = cls(**variant.kwargs).to(device)
        queries, seconds = epoch_seconds(loss, ranker, datamodule, device)
        rows.append(
            {"loss": variant.name, "queries": queries, "seconds": seconds, "source": source}
        )
        print(f"  epoch {variant.name:<28} {queries / seconds:9.1f} queries/s", flush=True)
    return rows


def epoch_table(rows: list[dict], device: str) -> str:
    if not rows:
        return ""
    lines = [
        f"One training epoch on {rows[0]['source']} ({device}, batch 32, Adam, loader "
        "included, best of 2):",
        "",
        "| loss | queries | epoch s | queries / s |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['loss']} | {row['queries']} | {row['seconds']:.2f} | "
            f"{row['queries'] / row['seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows_by_device: dict[str, list[dict]], path: Path) -> None:
    """Log-log seconds vs L per loss (one panel per device), with L and L² guide lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        1, len(rows_by_device), figsize=(7 * len(rows_by_device), 5), squeeze=False
    )
    for axis, (device, rows) in zip(axes[0], rows_by_device.items(), strict=True):
        names = list(dict.fromkeys(r["loss"] for r in rows))
        for name in names:
            points = [(r["L"], r["seconds"]) for r in rows if r["loss"] == name and "seconds" in r]
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", label=name)
        timed = [r for r in rows if "seconds" in r]
        if timed:
            low = min(r["L"] for r in timed)
            high = max(r["L"] for r in timed)
            base = min(r["seconds"] for r in timed)
            for power, style in ((1, ":"), (2, "--")):
                axis.plot(
                    [low, high],
                    [base, base * (high / low) ** power],
                    color="gray",
                    linestyle=style,
                    linewidth=0.8,
                    label=f"∝ L{'²' if power == 2 else ''}",
                )
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("list length L (B = 64, F = 136)")
        axis.set_ylabel("forward + backward seconds")
        axis.set_title(f"loss cost vs L ({device})")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--lengths", nargs="*", type=int, default=[16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--features", type=int, default=136)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--losses", nargs="*", help="substrings of loss names to keep")
    parser.add_argument(
        "--device",
        "--devices",
        dest="devices",
        nargs="*",
        default=None,
        help="cpu and/or cuda (default: cpu, plus cuda when available)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="eager vs torch.compile(fullgraph=True) instead of the L scan",
    )
    parser.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile backend for --compile (inductor, aot_eager, ...)",
    )
    parser.add_argument("--naive-max", type=int, default=1024, help="longest L for the loop")
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument("--max-gb", type=float, default=4.0)
    parser.add_argument("--no-epoch", action="store_true", help="skip the epoch table")
    parser.add_argument("--tiny", action="store_true", help="smoke mode: B=4, F=8, L 8 16")
    parser.add_argument("--out", type=Path, help="write the tables (markdown) here")
    parser.add_argument("--plot", type=Path, help="log-log PNG (default: --out with .png)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.lengths, args.batch, args.features, args.repeats = [8, 16], 4, 8, 1
    torch.manual_seed(0)
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    variants = load_variants(args.losses)

    parts, rows_by_device = [], {}
    for name in devices:
        device = torch.device(name)
        threads = torch.get_num_threads() if device.type == "cpu" else None
        label = f"{name}, {threads} thread(s)" if threads else torch.cuda.get_device_name(device)
        print(f"# {label}", flush=True)
        if args.compile:
            rows = compile_rows(variants, args.lengths, device, args)
            parts.append(
                compile_table(
                    rows, f"{label}, B = {args.batch}, F = {args.features}", args.compile_backend
                )
            )
        else:
            rows = []
            for variant, cls in variants:
                rows += time_lengths(variant, cls, args.lengths, device, args)
            rows_by_device[name] = rows
            parts.append(f"### Loss cost vs L on {label} (B = {args.batch}, F = {args.features})\n")
            parts.append(throughput_table(rows, name))
        if not args.no_epoch:
            parts.append(epoch_table(epoch_rows(variants, device, args.tiny), name))
    measure.publish("\n".join(parts), args.out, *devices)
    target = args.plot or (args.out.with_suffix(".png") if args.out else None)
    if target and rows_by_device:
        plot(rows_by_device, target)
        print(f"plot: {target}")


if __name__ == "__main__":
    main()

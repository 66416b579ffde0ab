"""The memory budget of a fold (``reader.fold_memory_bytes``, what ``check_fold_budget`` refuses
over) against the peak RSS growth of ``LetorDataModule.setup()`` on a cold cache, for a narrow
file (many rows, one feature) and a wide one (few rows, 700 features). Each case runs in a fresh
process; prints a markdown table (docs/data.md#memory-and-disk-budgets).

    python benchmarks/reader_budget.py [--narrow-rows 4000000] [--wide-rows 50000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SMALL_ROWS = 1000  # vali and test


def write_part(path: Path, rows: int, features: int, seed: int) -> None:
    """``rows`` LETOR lines of ``features`` features, 20 documents a query, with doc ids."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            values = rng.random((n, features)).round(3)
            labels = rng.integers(0, 3, n)
            body = [" ".join(f"{j + 1}:{v:g}" for j, v in enumerate(row)) for row in values]
            handle.writelines(
                f"{label} qid:{(start + i) // 20} {line} #docid = D{start + i}\n"
                for i, (label, line) in enumerate(zip(labels, body, strict=True))
            )


def measure(root: str, cache_dir: str) -> None:
    """In this (fresh) process: the budget, then setup()'s peak RSS growth, as JSON."""
    from differank.datamodules import reader
    from differank.datamodules.folds import resolve_fold_files
    from differank.datamodules.letor import LetorDataModule

    budget = reader.fold_memory_bytes(resolve_fold_files(root, 1), cache_dir=cache_dir)
    before = _rss_bytes()  # the imports' peak is about the same (ru_maxrss stays above it)
    LetorDataModule(root=root, cache_dir=cache_dir).setup()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"budget": budget, "growth": peak - before}))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--narrow-rows", type=int, default=4_000_000)
    parser.add_argument("--wide-rows", type=int, default=50_000)
    parser.add_argument("--measure", nargs=2, metavar=("ROOT", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(*args.measure)
        return
    cases = [("narrow", args.narrow_rows, 1), ("wide", args.wide_rows, 700)]
    print("| file (train) | budget | peak RSS growth | budget / growth |")
    print("|---|---:|---:|---:|")
    for name, rows, features in cases:
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder) / "data"
            write_part(root / "Fold1" / "train.txt", rows, features, 0)
            write_part(root / "Fold1" / "vali.txt", SMALL_ROWS, features, 1)
            write_part(root / "Fold1" / "test.txt", SMALL_ROWS, features, 2)
            command = [sys.executable, __file__, "--measure", str(root), f"{folder}/cache"]
            result = json.loads(subprocess.run(command, check=True, capture_output=True).stdout)
        budget, growth = result["budget"], result["growth"]
        print(
            f"| {name}: {rows:,} rows x {features} | {budget / 2**20:.0f} MiB | "
            f"{growth / 2**20:.0f} MiB | {budget / growth:.2f} |"
        )


if __name__ == "__main__":
    main()

"""Reading the MSLR-shaped set as Parquet against the LETOR text parse: cold read time and peak
memory (``data.format=parquet``, docs/data.md#parquet-data).

    python benchmarks/parquet_read.py --fraction 0.125 --repeats 3 \
        --out benchmarks/results/parquet_read.md
    python benchmarks/parquet_read.py --tiny          # smoke run (seconds)

1. The text set of ``benchmarks/data_path.py`` (``Fold1/{train,vali,test}.txt``, MSLR-WEB30K's
   shape at ``--fraction``: 136 features per line) is written once, then converted to Parquet
   once per layout: :func:`differank.datamodules.parquet.write_parquet`'s defaults (one float32
   column per feature, uncompressed, row groups of 16,384 rows), the same with snappy
   compression, and one list column.
2. Each read runs in a fresh process (nothing of differank cached, the files evicted from the
   OS page cache with ``posix_fadvise(DONTNEED)`` first; a second column keeps the page cache
   warm): the text path is ``read_letor_file`` of the three files into an empty cache folder
   (the cold parse every first run pays), the Parquet path ``read_parquet`` of the three files
   (its defaults: read into buffers, row groups decoded in one thread; and the alternatives:
   memory-mapped files, a decode in pyarrow's threads).
3. Peak memory is what the read adds to the process: ``VmHWM`` after the read minus ``VmRSS``
   before it (``measure.rss_peak_bytes``; the interpreter and the imports are not counted),
   against the float32 features it returns. Times are the fastest of ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import measure
from data_path import SPLITS
from data_path import run_json as _data_path_worker
from measure import mib

STEMS = [name.removesuffix(".txt") for name, _ in SPLITS]
# layout name -> write_parquet options
LAYOUTS = {
    "columns (default)": {},
    "columns, snappy": {"compression": "snappy"},
    "list column": {"list_column": True},
}


def _evict(paths: list[Path]) -> None:
    """Drop the files' pages from the OS page cache (clean pages: no root needed)."""
    for path in paths:
        handle = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(handle)


def convert_worker(data: Path) -> dict:
    """Each layout's Parquet files of the text set (skipped when present)."""
    from differank.datamodules.parquet import write_parquet
    from differank.datamodules.reader import read_letor_file

    sizes = {}
    with tempfile.TemporaryDirectory() as cache:
        for index, (layout, options) in enumerate(LAYOUTS.items()):
            folder = data / f"parquet-{index}"
            paths = [folder / f"{stem}.parquet" for stem in STEMS]
            if not all(p.is_file() for p in paths):
                for stem, path in zip(STEMS, paths, strict=True):
                    part = read_letor_file(data / "Fold1" / f"{stem}.txt", cache_dir=cache)
                    write_parquet(path, part.features, part.labels, part.qids, **options)
                    part.release_pages()
            sizes[layout] = sum(p.stat().st_size for p in paths)
    return sizes


def read_worker(kind: str, files: list[str], memory_map: bool, threads: bool, evict: bool) -> dict:
    """One cold read of ``files`` in this fresh process: seconds, the peak memory it adds, and
    the float32 bytes of the features it returns."""
    import numpy as np

    from differank.datamodules import parquet
    from differank.datamodules.parquet import read_parquet
    from differank.datamodules.reader import read_letor_file

    parquet._DECODE_THREADS = threads  # the alternative the reader's default was chosen over

    paths = [Path(f) for f in files]
    if kind == "parquet":
        import pyarrow.parquet  # noqa: F401  (imported before the measurement, as text's C scan)
    kept: list = []
    with tempfile.TemporaryDirectory() as cache:
        if evict:
            _evict(paths)

        def read() -> None:
            for path in paths:
                if kind == "text":
                    kept.append(read_letor_file(path, cache_dir=cache).features)
                else:
                    kept.append(read_parquet(path, memory_map=memory_map)[0])

        start = time.perf_counter()
        peak = measure.rss_peak_bytes(read)
        seconds = time.perf_counter() - start
    features = sum(int(np.prod(x.shape)) * 4 for x in kept)
    return {
        "seconds": seconds,
        "peak": peak,
        "features": features,
        "maxrss": measure.max_rss_bytes(),
    }


def fastest(args: list[str], repeats: int) -> dict:
    runs = [measure.worker_json(__file__, args) for _ in range(repeats)]
    return min(runs, key=lambda run: run["seconds"])


def report(info: dict, rows: list[dict], command: str) -> str:
    text, default = rows[0], rows[1]  # the text parse; read_parquet's defaults
    lines = [
        f"# Parquet read vs LETOR text parse (MSLR-WEB30K shape, fraction {info['fraction']:g})",
        "",
        f"Command (from the repository root): `{command}`",
        "",
        f"{info['queries']:,} queries, {info['documents']:,} documents, {info['features']} "
        f"features in Fold1/{{train,vali,test}}: {mib(info['text_bytes'])} MiB of text, "
        f"{mib(info['float32_bytes'])} MiB of float32 features. Each read is a fresh process "
        'with nothing of differank cached; "evicted": the files dropped from the OS page cache '
        'first (posix_fadvise DONTNEED), "warm": left in it. Peak = VmHWM after the read minus '
        "VmRSS before it (imports excluded), with the returned features alive. Fastest of "
        f"{info['repeats']} run(s).",
        "",
        "| reader | layout | file MiB | read s (evicted) | read s (warm) | vs text parse "
        "(evicted) | peak MiB | peak / float32 features |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        cold, warm = row["evicted"], row["warm"]
        ratio = cold["seconds"] / text["evicted"]["seconds"]
        lines.append(
            f"| {row['reader']} | {row['layout']} | {mib(row['bytes'])} | {cold['seconds']:.2f} | "
            f"{warm['seconds']:.2f} | {ratio:.2f}x | {mib(cold['peak'])} | "
            f"{cold['peak'] / cold['features']:.2f}x |"
        )
    ratio = default["evicted"]["seconds"] / text["evicted"]["seconds"]
    memory = default["evicted"]["peak"] / default["evicted"]["features"]
    lines += [
        "",
        "| criterion (read_parquet's defaults) | measured | target | met |",
        "|---|---:|---:|---|",
        f"| cold read / text cold parse (OS cache evicted) | {ratio:.2f}x | <= 0.5x | "
        f"{'yes' if ratio <= 0.5 else 'NO'} |",
        f"| peak memory / float32 features | {memory:.2f}x | <= 1.3x | "
        f"{'yes' if memory <= 1.3 else 'NO'} |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fraction", type=float, default=0.125)
    parser.add_argument("--tiny", action="store_true", help="smoke mode: fraction 0.002")
    parser.add_argument("--data", type=Path, help="where the set goes (default /tmp/...)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write the table (markdown) here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--mmap", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "convert":
        print(json.dumps(convert_worker(args.data)))
        return
    if args.worker in ("text", "parquet"):
        result = read_worker(args.worker, args.files, args.mmap, args.threads, not args.warm)
        print(json.dumps(result))
        return
    fraction = 0.002 if args.tiny else args.fraction
    data = args.data or Path(f"/tmp/differank-mslr-{fraction:g}")
    written = _data_path_worker(
        ["--worker", "write", "--data", str(data), "--fraction", str(fraction)]
    )
    info = {
        "fraction": fraction,
        "repeats": args.repeats,
        "queries": written["queries"],
        "documents": written["docs"],
        "features": written["features"],
        "text_bytes": written["text_bytes"],
        "float32_bytes": written["float32_bytes"],
    }
    sizes = measure.worker_json(__file__, ["--worker", "convert", "--data", str(data)])
    text_files = [str(data / "Fold1" / f"{stem}.txt") for stem in STEMS]
    layout_files = {
        layout: [str(data / f"parquet-{i}" / f"{stem}.parquet") for stem in STEMS]
        for i, layout in enumerate(LAYOUTS)
    }
    default, snappy, listed = (layout_files[name] for name in LAYOUTS)
    readers = [  # (reader, layout, worker, files, flags)
        ("text (LETOR parse)", "LETOR text", "text", text_files, []),
        ("read_parquet (defaults)", "columns (default)", "parquet", default, []),
        ("read_parquet, memory-mapped", "columns (default)", "parquet", default, ["--mmap"]),
        ("read_parquet, threaded decode", "columns (default)", "parquet", default, ["--threads"]),
        ("read_parquet (defaults)", "columns, snappy", "parquet", snappy, []),
        ("read_parquet (defaults)", "list column", "parquet", listed, []),
    ]
    rows = []
    for name, layout, kind, files, flags in readers:
        size = info["text_bytes"] if kind == "text" else sizes[layout]
        row = {"reader": name, "layout": layout, "bytes": size}
        for mode, extra in (("evicted", []), ("warm", ["--warm"])):
            row[mode] = fastest(["--worker", kind, "--files", *files, *flags, *extra], args.repeats)
            print(f"{name} [{layout}] {mode}: {row[mode]['seconds']:.2f} s", flush=True)
        rows.append(row)
    shown = ["python", "benchmarks/parquet_read.py", *(argv if argv is not None else sys.argv[1:])]
    measure.publish(report(info, rows, " ".join(shown)), args.out)


if __name__ == "__main__":
    main()

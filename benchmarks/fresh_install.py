"""A fresh install's first run against the same run again, and the reader against XGBoost's loader.

    python benchmarks/fresh_install.py --out benchmarks/results/fresh_install.md
    python benchmarks/fresh_install.py --fraction 0.002 --repeats 1   # smoke run

1. ``python train.py data=mq2008 trainer.max_epochs=1`` (MQ2008 fold 1, one epoch), each run in
   a fresh process with an empty data cache (``$DIFFERANK_CACHE`` a new folder), so that only
   compilation differs, and with Python's bytecode in a folder of the benchmark's own
   (``PYTHONPYCACHEPREFIX``; bytecode is written, whatever ``PYTHONDONTWRITEBYTECODE`` says):

   * **fresh install**: the bytecode ``pip install`` leaves, i.e. every library's (pip compiles
     what it installs) but none of the project's own source (an editable install is compiled on
     first import). It is made by a run of ``python train.py trainer.max_epochs=1`` on the tiny
     default data into a new folder, whose copy of the project's bytecode is then deleted; any
     compile cache the project has is empty (it has none: the scanner is C, built at install);
   * **again**: the same command once more, on the bytecode the fresh-install run wrote;
   * **no bytecode at all**: ``PYTHONPYCACHEPREFIX`` a new empty folder, so torch's and every
     library's bytecode is compiled too (what ``pip install --no-compile`` would leave).

   The target: fresh install <= 1.3 x again (issue 32).
2. The 1/8 MSLR-WEB30K-shaped text of ``benchmarks/data_path.py`` (three files, written once):
   ``read_letor_file`` with an empty cache against ``xgboost.DMatrix(path + "?format=libsvm")``,
   each in a fresh process, imports included. The target: <= 2 x XGBoost.

Wall times on a shared machine: ``--repeats N`` runs each row N times, interleaved, and reports
the fastest (the least disturbed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import data_path
import measure
from measure import ROOT

TRAIN = ["data=mq2008", "trainer.max_epochs=1"]


class Run(NamedTuple):
    wall: float  # seconds
    cpu: float  # user + system seconds of the process


def train_run(overrides: list[str], pycache: Path, scratch: Path) -> Run:
    """Wall and CPU seconds of ``python train.py <overrides>`` with an empty data cache and its
    bytecode in ``pycache``."""
    cache, run_dir = Path(tempfile.mkdtemp(dir=scratch)), Path(tempfile.mkdtemp(dir=scratch))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.update(DIFFERANK_CACHE=str(cache), PYTHONPYCACHEPREFIX=str(pycache))
    command = [sys.executable, "train.py", *overrides, f"hydra.run.dir={run_dir}"]
    start, cpu = time.perf_counter(), children_cpu_seconds()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    run = Run(time.perf_counter() - start, children_cpu_seconds() - cpu)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    shutil.rmtree(cache)
    shutil.rmtree(run_dir)
    return run


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def installed_bytecode(scratch: Path) -> Path:
    """A bytecode folder as ``pip install`` leaves it: the libraries' bytecode (from a run on
    the tiny default data), none of the project's."""
    pycache = Path(tempfile.mkdtemp(dir=scratch))
    train_run(["trainer.max_epochs=1"], pycache, scratch)
    venv = Path(sys.prefix).resolve()
    for mirror in (pycache / ROOT.relative_to(ROOT.anchor)).iterdir():  # the project's folders
        if not venv.is_relative_to(ROOT / mirror.name):
            shutil.rmtree(mirror)  # the project's own source, not a virtual environment inside
    return pycache


def first_runs(repeats: int, scratch: Path) -> dict[str, Run]:
    """The fastest (wall) of ``repeats`` tries of each row (fresh install, again, no bytecode)."""
    tries = {"fresh install": [], "again": [], "no bytecode at all": []}
    for _ in range(repeats):
        pycache = installed_bytecode(scratch)
        tries["fresh install"].append(train_run(TRAIN, pycache, scratch))
        tries["again"].append(train_run(TRAIN, pycache, scratch))
        shutil.rmtree(pycache)
        empty = Path(tempfile.mkdtemp(dir=scratch))
        tries["no bytecode at all"].append(train_run(TRAIN, empty, scratch))
        shutil.rmtree(empty)
        print(f"  train.py: {json.dumps({k: v[-1] for k, v in tries.items()})}", flush=True)
    return {name: min(runs) for name, runs in tries.items()}


def reader_worker(files: list[str], cache: str) -> dict:
    start = time.perf_counter()
    from differank.datamodules.reader import read_letor_file

    rows = sum(read_letor_file(path, cache_dir=cache).num_rows for path in files)
    return {"seconds": time.perf_counter() - start, "rows": rows}


def run_json(args: list[str]) -> dict:
    """A worker of this script in a fresh process: its JSON result."""
    command = [sys.executable, str(Path(__file__).resolve()), *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"worker {args[:2]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse_runs(files: list[str], repeats: int, scratch: Path) -> dict[str, float]:
    """The fastest of ``repeats`` loads of the files by each loader, in fresh processes."""
    tries = {"differank read_letor_file (empty cache)": [], "xgboost DMatrix": []}
    for _ in range(repeats):
        cache = tempfile.mkdtemp(dir=scratch)
        ours = run_json(["--worker", "reader", "--files", *files, "--cache", cache])
        shutil.rmtree(cache)
        theirs = data_path.run_json(["--worker", "xgboost", "--files", *files])
        tries["differank read_letor_file (empty cache)"].append(ours["seconds"])
        tries["xgboost DMatrix"].append(theirs["seconds"])
        print(f"  parse: ours {ours['seconds']:.2f} s, xgboost {theirs['seconds']:.2f} s")
    return {name: min(seconds) for name, seconds in tries.items()}


def report(command: str, info: dict, train: dict[str, Run], parse: dict[str, float]) -> str:
    fresh, again = train["fresh install"], train["again"]
    ours, xgb = parse["differank read_letor_file (empty cache)"], parse["xgboost DMatrix"]
    lines = [
        f"`{command}`",
        "",
        f"`python train.py {' '.join(TRAIN)}` (MQ2008 fold 1, one epoch), empty data cache each "
        f"run; {os.cpu_count()} cores:",
        "",
        "| run | wall s | / again | CPU s | / again |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, run in train.items():
        lines.append(
            f"| {name} | {run.wall:.1f} | {run.wall / again.wall:.2f} | {run.cpu:.1f} | "
            f"{run.cpu / again.cpu:.2f} |"
        )
    lines += [
        "",
        f"MSLR-WEB30K-shaped LETOR text at fraction {info['fraction']:g} ({info['docs']:,} "
        f"documents, {info['text_bytes'] / 2**20:,.0f} MiB in 3 files), imports included:",
        "",
        "| loader | seconds | MiB/s |",
        "|---|---:|---:|",
    ]
    for name, seconds in parse.items():
        lines.append(f"| {name} | {seconds:.1f} | {info['text_bytes'] / 2**20 / seconds:.0f} |")
    lines += [
        "",
        "| criterion | measured | target | met |",
        "|---|---:|---:|---|",
        f"| first run after install / same run again, wall (CPU) | "
        f"{fresh.wall / again.wall:.2f} ({fresh.cpu / again.cpu:.2f}) | <= 1.3 | "
        f"{'yes' if fresh.wall <= 1.3 * again.wall else 'NO'} |",
        f"| parse / XGBoost DMatrix | {ours / xgb:.2f} | <= 2 | "
        f"{'yes' if ours <= 2 * xgb else 'NO'} |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fraction", type=float, default=0.125, help="of MSLR-WEB30K's size")
    parser.add_argument("--data", type=Path, help="where the MSLR-shaped text goes")
    parser.add_argument("--repeats", type=int, default=2, help="tries per row; the fastest")
    parser.add_argument("--out", type=Path, help="write the tables (markdown) here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "reader":
        print(json.dumps(reader_worker(args.files, args.cache)))
        return
    command = "python benchmarks/fresh_install.py " + " ".join(argv or sys.argv[1:])
    data = args.data or Path(f"/tmp/differank-mslr-{args.fraction:g}")
    info = data_path.run_json(
        ["--worker", "write", "--data", str(data), "--fraction", str(args.fraction)]
    )
    files = [str(data / "Fold1" / name) for name, _ in data_path.SPLITS]
    with tempfile.TemporaryDirectory(prefix="differank-fresh-") as scratch:
        train = first_runs(args.repeats, Path(scratch))
        parse = parse_runs(files, args.repeats, Path(scratch))
    meta = measure.run_metadata("cpu")
    text = report(command.strip(), info, train, parse) + "\n" + measure.metadata_line(meta)
    print(text, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()

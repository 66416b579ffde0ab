"""The user's data path at web scale: ``train.py`` on MSLR-WEB30K-shaped LETOR text, cold and warm,
beside XGBoost's and LightGBM's loaders on the same files.

    python benchmarks/data_path.py --fraction 0.125 --out benchmarks/results/data_path.md
    python benchmarks/data_path.py --tiny             # smoke run (seconds)

1. Writes ``Fold1/{train,vali,test}.txt`` (60/20/20 % of the queries) of
   :func:`differank.datamodules.mslr_synthetic.generate_mslr` at ``--fraction`` of MSLR-WEB30K's
   3,771,125 documents as LETOR text (136 features per line, like the real files).
2. Times loading the three files with ``xgboost.DMatrix(path + "?format=libsvm")`` and
   ``lightgbm.Dataset(path).construct()`` (each in its own process, all cores). LightGBM's
   LibSVM parser rejects ``qid:`` tokens, so it loads copies without them, with the query
   sizes in ``<file>.query`` (its ranking input), written once beside the set; its time
   includes binning the features, which ``construct()`` does while loading. MiB/s is of the
   original text.
3. Runs ``train.py``'s ``train()`` (``data=letor loss=domination trainer.max_epochs=1``) in a
   fresh process with an empty cache (cold), again with the cache (warm), and the tiny default
   data (``python train.py`` with the same loss and epochs) for reference. Phases are timed by
   wrapping the functions ``train()`` calls: reading the files (parse or cache load), the
   split features (copy + normalise, or memory-map the cached ones), ``Trainer.fit`` (one
   epoch, validation, checkpoints), ``Trainer.test`` and ``write_lightning_outputs``.
4. Runs the warm DDP case (``trainer=ddp trainer.devices=2 trainer.accelerator=cpu``) and samples
   the processes' RSS and PSS (``/proc/PID/smaps_rollup``): PSS charges shared pages once.

Peak RSS is the worker's ``ru_maxrss``; "cold parse" is cold wall - warm wall (what a first
run pays over a cached one). The criteria table checks the targets of
docs/data.md#reading-at-web-scale. Wall times are on a shared machine: compare rows of one
run; ``--repeats N`` runs each row N times and reports the fastest.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import measure
from measure import ROOT

SPLITS = (("train.txt", 0.6), ("vali.txt", 0.2), ("test.txt", 0.2))
TRAIN_OVERRIDES = ["loss=domination", "trainer.max_epochs=1", "logger=csv"]
QID = re.compile(rb" qid:(\S+)")


def write_set(root: Path, fraction: float, seed: int) -> dict:
    """The three split files (skipped when ``root/done.json`` says they exist)."""
    from differank.datamodules.mslr_synthetic import MSLR_WEB30K, generate_mslr, letor_text

    marker = root / "done.json"
    if marker.is_file() and json.loads(marker.read_text())["fraction"] == fraction:
        return json.loads(marker.read_text())
    start = time.perf_counter()
    n_queries = max(10, round(MSLR_WEB30K["n_queries"] * fraction))
    n_docs = max(n_queries * 2, round(MSLR_WEB30K["n_docs"] * fraction))
    max_list = min(MSLR_WEB30K["max_list"], n_docs // n_queries * 8)
    data = generate_mslr(n_queries=n_queries, n_docs=n_docs, max_list=max_list, seed=seed)
    (root / "Fold1").mkdir(parents=True, exist_ok=True)
    first, sizes = 0, {}
    for name, share in SPLITS:
        last = n_queries if name == "test.txt" else first + round(n_queries * share)
        with open(root / "Fold1" / name, "wb") as handle:
            for q0 in range(first, last, 512):
                q1 = min(q0 + 512, last)
                rows = slice(int(data.offsets[q0]), int(data.offsets[q1]))
                from differank.datamodules.mslr_synthetic import RankingArrays

                part = RankingArrays(
                    data.features[rows],
                    data.labels[rows],
                    data.offsets[q0 : q1 + 1] - data.offsets[q0],
                )
                handle.write(letor_text(part, first_qid=q0 + 1))
        sizes[name] = (root / "Fold1" / name).stat().st_size
        first = last
    info = {
        "fraction": fraction,
        "queries": n_queries,
        "docs": n_docs,
        "features": int(data.features.shape[1]),
        "float32_bytes": int(data.features.nbytes),
        "text_bytes": sum(sizes.values()),
        "write_seconds": time.perf_counter() - start,
    }
    marker.write_text(json.dumps(info))
    return info


def lightgbm_copies(files: list[str], out: Path) -> list[str]:
    """The split files as LightGBM's text loader takes a ranking set: without the ``qid:``
    tokens (its LibSVM parser rejects them), query sizes in ``<file>.query`` beside each copy.
    Written once per set, outside the timed load."""
    copies = [out / Path(path).name for path in files]
    if all(Path(f"{copy}.query").is_file() for copy in copies):
        return [str(copy) for copy in copies]
    out.mkdir(parents=True, exist_ok=True)
    for path, copy in zip(files, copies, strict=True):
        qids = []
        with open(path, "rb") as source, open(copy, "wb") as target:
            while chunk := source.read(1 << 26) + source.readline():  # whole lines per chunk
                qids += QID.findall(chunk)
                target.write(QID.sub(b"", chunk))
        starts = [0] + [i for i in range(1, len(qids)) if qids[i] != qids[i - 1]] + [len(qids)]
        sizes = "".join(f"{b - a}\n" for a, b in itertools.pairwise(starts))
        Path(f"{copy}.query").write_text(sizes)  # written last: it marks the copy complete
    return [str(copy) for copy in copies]


def peer_worker(kind: str, files: list[str]) -> dict:
    start = time.perf_counter()
    if kind == "xgboost":
        import xgboost

        rows = sum(xgboost.DMatrix(f"{path}?format=libsvm").num_row() for path in files)
    else:
        import lightgbm

        rows = sum(
            lightgbm.Dataset(path, params={"verbose": -1}).construct().num_data() for path in files
        )
    return {
        "seconds": time.perf_counter() - start,
        "rows": rows,
        "peak_rss": measure.max_rss_bytes(),
    }


def train_worker(overrides: list[str], run_dir: Path) -> dict:
    """``train()`` as ``python train.py`` runs it, with its phases timed."""
    start = time.perf_counter()
    import pytorch_lightning as pl

    import differank.datamodules.letor as letor
    import differank.rankers.run.trainer_tasks as tasks
    from differank.rankers.run.runs import compose_config

    phases: dict[str, float] = {}

    def timed(original, phase):
        def wrapper(*args, **kwargs):
            begin = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - begin

        return wrapper

    letor.read_letor_file = timed(letor.read_letor_file, "read files")
    module = letor.LetorDataModule
    module._store_features = timed(module._store_features, "split features")
    module._load = timed(module._load, "data setup (all)")
    pl.Trainer.fit = timed(pl.Trainer.fit, "fit (1 epoch + val)")
    pl.Trainer.test = timed(pl.Trainer.test, "test")
    tasks.write_lightning_outputs = timed(tasks.write_lightning_outputs, "outputs + metrics")
    phases["imports"] = time.perf_counter() - start
    tasks.run_task(compose_config(overrides, run_dir=run_dir), run_dir, overrides=overrides)
    return {
        "phases": phases,
        "wall_inside": time.perf_counter() - start,
        "peak_rss": measure.max_rss_bytes(),
    }


def run_json(args: list[str], env=None) -> dict:
    """A worker in a fresh process; its JSON result plus the process wall time."""
    start = time.perf_counter()
    result = measure.worker_json(__file__, args, env=env)
    return {**result, "wall": time.perf_counter() - start}


def tree_memory(root_pid: int) -> dict:
    """Summed RSS and PSS (bytes) of a process and its descendants, in all and for the mapped
    split-feature cache files alone (``.../letor/splits/...``)."""
    pids, frontier = [], [root_pid]
    while frontier:
        pid = frontier.pop()
        pids.append(pid)
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        frontier += [int(c) for c in children]
    total = {"rss": 0, "pss": 0, "features_rss": 0, "features_pss": 0, "processes": len(pids)}
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
        except OSError:
            continue
        features = False
        for line in lines:
            head = line.split()
            if head and not head[0].endswith(":"):  # a mapping's header line
                features = "/letor/splits/" in line
            elif head and head[0] in ("Rss:", "Pss:"):
                key = head[0][:-1].lower()
                total[key] += int(head[1]) * 1024
                if features:
                    total[f"features_{key}"] += int(head[1]) * 1024
    return total


def ddp_run(overrides: list[str], run_dir: Path, env: dict) -> dict:
    command = [
        sys.executable,
        "train.py",
        *overrides,
        "trainer=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        f"hydra.run.dir={run_dir}",
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir.parent / "ddp.log"
    start = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log, env=env)
        peak = {"pss": 0}
        while process.poll() is None:
            sample = tree_memory(process.pid)
            if sample["pss"] > peak["pss"]:
                peak = sample
            time.sleep(0.2)
    if process.returncode != 0:
        raise RuntimeError(f"DDP run failed:\n{log_path.read_text()[-3000:]}")
    return {"wall": time.perf_counter() - start, **peak}


def work(row: dict) -> float:
    """Seconds after the imports: what the run did, without the interpreter's start."""
    return row["wall_inside"] - row["phases"]["imports"]


def gib(value: float) -> str:
    return f"{value / 2**30:.2f}"


def report(info: dict, peers: dict, runs: dict, ddp: dict | None) -> str:
    raw = info["float32_bytes"]
    lines = [
        f"MSLR-WEB30K-shaped LETOR text at fraction {info['fraction']:g}: {info['queries']:,} "
        f"queries, {info['docs']:,} documents, {info['features']} features; "
        f"{info['text_bytes'] / 2**20:,.0f} MiB of text (3 files), {raw / 2**20:,.0f} MiB of "
        f"float32 features; {os.cpu_count()} cores.",
        "",
        "| run | wall s | after imports s | peak RSS GiB | bytes / doc (RSS) | read files s "
        "| split features s | data setup s | fit s | test s | outputs s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in runs.items():
        p = row["phases"]
        docs = info["docs"] if name != "tiny default data" else 1
        per_doc = f"{row['peak_rss'] / docs:,.0f}" if docs > 1 else "-"
        lines.append(
            f"| {name} | {row['wall']:.1f} | {work(row):.1f} | {gib(row['peak_rss'])} | "
            f"{per_doc} | "
            f"{p.get('read files', 0):.2f} | {p.get('split features', 0):.2f} | "
            f"{p.get('data setup (all)', 0):.2f} | {p.get('fit (1 epoch + val)', 0):.1f} | "
            f"{p.get('test', 0):.1f} | {p.get('outputs + metrics', 0):.2f} |"
        )
    lines += [
        "",
        "| loader (same 3 files) | seconds | MiB/s | peak RSS GiB |",
        "|---|---:|---:|---:|",
    ]
    mib = info["text_bytes"] / 2**20
    for name, row in peers.items():
        if "error" in row:
            lines.append(f"| {name} | failed: {row['error']} | | |")
        else:
            lines.append(
                f"| {name} | {row['seconds']:.1f} | {mib / row['seconds']:.0f} | "
                f"{gib(row['peak_rss'])} |"
            )
    cold, warm = runs["cold (parse + cache)"], runs["warm (cache)"]
    parse, parse_work = cold["wall"] - warm["wall"], work(cold) - work(warm)
    xgb = peers.get("xgboost DMatrix", {}).get("seconds")
    limit = 2 * raw + 1.5 * 2**30
    lines += ["", "| criterion | measured | target | met |", "|---|---:|---:|---|"]
    if xgb:
        lines.append(
            f"| cold parse: cold - warm, wall (after imports) | {parse:.1f} s "
            f"({parse_work:.1f} s) | <= 2 x XGBoost {xgb:.1f} s = {2 * xgb:.1f} s | "
            f"{'yes' if max(parse, parse_work) <= 2 * xgb else 'NO'} |"
        )
    tiny = runs.get("tiny default data")
    if tiny:
        extra, extra_work = warm["wall"] - tiny["wall"], work(warm) - work(tiny)
        setup_extra = warm["phases"].get("data setup (all)", 0) - tiny["phases"].get(
            "data setup (all)", 0
        )
        lines.append(
            f"| warm - tiny default data, wall (after imports; data setup) | "
            f"{extra:.1f} s ({extra_work:.1f} s; {setup_extra:+.2f} s) | <= 2 s | "
            f"{'yes' if extra_work <= 2 else 'NO'} |"
        )
    setup = cold["phases"]["data setup (all)"] - warm["phases"]["data setup (all)"]
    if xgb:
        lines.append(
            f"| cold - warm data setup (parse + hash + cache + normalise) | {setup:.1f} s | "
            f"<= 2 x XGBoost = {2 * xgb:.1f} s | {'yes' if setup <= 2 * xgb else 'NO'} |"
        )
    lines.append(
        f"| cold peak RSS | {gib(cold['peak_rss'])} GiB | <= 2 x raw + 1.5 GiB = "
        f"{gib(limit)} GiB | {'yes' if cold['peak_rss'] <= limit else 'NO'} |"
    )
    if ddp:
        copies = ddp["features_pss"] / max(raw, 1)
        lines.append(
            f"| 2 DDP CPU processes ({ddp['processes']} in the tree), warm, at peak PSS: "
            f"total PSS {gib(ddp['pss'])} GiB (RSS {gib(ddp['rss'])} GiB); mapped split features "
            f"PSS {gib(ddp['features_pss'])} GiB (RSS summed over processes "
            f"{gib(ddp['features_rss'])} GiB) | {copies:.2f} copies of the {raw / 2**30:.2f} GiB "
            f"features | 1 copy | {'yes' if copies <= 1.05 else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fraction", type=float, default=0.125)
    parser.add_argument("--tiny", action="store_true", help="smoke mode: fraction 0.002")
    parser.add_argument("--data", type=Path, help="where the text goes (default /tmp/...)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-ddp", action="store_true")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs per row; the fastest is reported"
    )
    parser.add_argument("--out", type=Path, help="write the tables (markdown) here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--overrides", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker in ("xgboost", "lightgbm"):
        print(json.dumps(peer_worker(args.worker, args.files)))
        return
    if args.worker == "train":
        print(json.dumps(train_worker(args.overrides, args.run_dir)))
        return
    if args.worker == "write":
        print(json.dumps(write_set(args.data, args.fraction, args.seed)))
        return
    fraction = 0.002 if args.tiny else args.fraction
    data = args.data or Path(f"/tmp/differank-mslr-{fraction:g}")
    # generated in a worker: this process stays small, and so does the peak RSS its children
    # inherit (Linux keeps ru_maxrss across exec)
    info = run_json(
        [
            "--worker",
            "write",
            "--data",
            str(data),
            "--fraction",
            str(fraction),
            "--seed",
            str(args.seed),
        ]
    )
    print(f"data: {data} ({info['text_bytes'] / 2**20:,.0f} MiB)", flush=True)
    files = [str(data / "Fold1" / name) for name, _ in SPLITS]
    peers = {}
    loaders = (
        ("xgboost", "xgboost DMatrix", files),
        (
            "lightgbm",
            "lightgbm Dataset (qid in .query files)",
            lightgbm_copies(files, data / "lightgbm"),
        ),
    )
    for kind, label, paths in loaders:
        try:
            peers[label] = run_json(["--worker", kind, "--files", *paths])
        except RuntimeError as error:
            peers[label] = {"error": str(error).splitlines()[-1][:120]}
        print(f"  {label}: {peers[label]}", flush=True)
    cache = data / "cache"  # the default cache of these runs, so train.py's evaluation shares it
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "DIFFERANK_CACHE": str(cache)}
    runs_dir = data / "runs"
    letor = ["data=letor", f"data.root={data}", *TRAIN_OVERRIDES]
    runs = {}
    for name, overrides in (
        ("cold (parse + cache)", letor),
        ("warm (cache)", letor),
        ("tiny default data", TRAIN_OVERRIDES),
    ):
        tries = []
        for _ in range(args.repeats):
            run_dir = runs_dir / name.split()[0]
            shutil.rmtree(run_dir, ignore_errors=True)
            if name.startswith("cold"):
                shutil.rmtree(cache, ignore_errors=True)
            tries.append(
                run_json(
                    ["--worker", "train", "--run-dir", str(run_dir), "--overrides", *overrides],
                    env=env,
                )
            )
        runs[name] = min(tries, key=lambda row: row["wall"])  # the least disturbed try
        print(
            f"  {name}: wall {runs[name]['wall']:.1f} s, peak RSS "
            f"{gib(runs[name]['peak_rss'])} GiB, {runs[name]['phases']}",
            flush=True,
        )
    ddp = None
    if not args.no_ddp:
        ddp = ddp_run(letor, runs_dir / "ddp", env)
        print(f"  ddp: {ddp}", flush=True)
    meta = measure.run_metadata("cpu")  # after the workers: torch stays out of their start
    text = report(info, peers, runs, ddp) + "\n" + measure.metadata_line(meta)
    print(text, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        record = {"info": info, "peers": peers, "runs": runs, "ddp": ddp, "meta": meta}
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Documents per second and peak memory of training and of scoring, per objective x scorer and
list length, plus an MSLR-WEB30K-shaped training epoch end to end: numbers a user can quote.

    python benchmarks/training_throughput.py --out benchmarks/results/training_throughput.md
    python benchmarks/training_throughput.py --tiny            # smoke run (seconds)
    python benchmarks/training_throughput.py --device cuda --compile   # CUDA, compile off and on

Each (objective, scorer, L) row builds what ``train.py model=SCORER loss=OBJECTIVE`` builds
(conf/model/*.yaml and conf/loss/*.yaml: :class:`RankingModule`, its optimizer) at F = 136
(MSLR-WEB30K's width) and times on one batch of B = ``--docs`` / L full lists (labels 0-4 in
MSLR proportions):

* training: forward + loss + backward + optimizer step (``RankingModule.batch_loss``);
* scoring: the forward pass alone under ``torch.no_grad`` (evaluation, prediction).

Documents per second = B x L / the fastest of ``--repeats`` calls after one warm-up. On CPU the
time is the process' CPU time with one torch thread (what an idle core takes; the machine may be
shared), on CUDA the wall time between ``torch.cuda.synchronize()`` calls. Peak memory is the
rise of the process' peak RSS during one call on CPU (benchmarks/throughput.py's method),
``torch.cuda.max_memory_allocated`` on CUDA. The cone loss needs the ConeRank scorer, whose rows
stand for it; a row whose training call takes over ``--max-seconds`` ends its objective x
scorer's scan (later, longer L are listed as skipped). ``--compile`` adds rows with the scorer
and loss under ``torch.compile`` (CUDA: worth it; on CPU compilation takes minutes, so off
by default).

The epoch row runs one training epoch of ``model=linear loss=domination`` through Lightning on
benchmarks/data_path.py's MSLR-WEB30K-shaped set at ``--fraction`` (warm cache, batch 32).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import measure
import torch
from throughput import make_batch, peak_bytes

ROOT = Path(__file__).resolve().parents[1]
N_FEATURES = 136
OBJECTIVES = ("domination", "hinge", "convex", "listnet", "cone")
SCORERS = ("linear", "mlp", "transformer")
LENGTHS = (16, 128, 1024, 1251)


def build_module(scorer: str, objective: str, n_features: int):
    """What ``train.py model=SCORER loss=OBJECTIVE`` builds (composed by train.py's own
    ``differank.compose``), without a learning-rate schedule (one step is timed, not an epoch)."""
    import tempfile

    from hydra.utils import instantiate

    from differank.rankers.run.runs import compose_config

    overrides = [f"model={scorer}", f"loss={objective}", "++model.scheduler=null"]
    cfg = compose_config(overrides, run_dir=tempfile.mkdtemp())
    torch.manual_seed(0)
    module = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=n_features)
    return module, module.configure_optimizers()


def train_fn(module, optimizer, batch):
    def step():
        loss = module.batch_loss(batch) + module.penalty()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def score_fn(module, batch):
    def score():
        with torch.no_grad():
            module(batch["features"], batch["mask"])

    return score


def best_seconds(fn, device, repeats: int) -> float:
    clock = measure.device_clock(device)
    return min(measure.call_seconds(fn, clock, device) for _ in range(repeats))


def scan(objective, scorer, args, device, compiled: bool) -> list[dict]:
    rows, stopped = [], None
    for length in args.lengths:
        row = {"objective": objective, "scorer": scorer, "L": length, "compiled": compiled}
        if stopped:
            rows.append({**row, "skipped": stopped})
            continue
        batch_size = max(1, args.docs // length)
        features, labels, mask = make_batch(batch_size, length, args.features, device)
        batch = {"features": features, "labels": labels, "mask": mask}
        module, optimizer = build_module(scorer, objective, args.features)
        module.to(device)
        if compiled:
            module.ranker = torch.compile(module.ranker)
            module.loss = torch.compile(module.loss)
        train, score = train_fn(module, optimizer, batch), score_fn(module, batch)
        try:
            train()  # warm-up (and compilation)
        except Exception as error:  # a configuration that does not run is listed, not hidden
            rows.append({**row, "skipped": f"{type(error).__name__}: {str(error)[:60]}"})
            stopped = "after an error at a shorter L"
            continue
        docs = batch_size * length
        row["B"] = batch_size
        seconds = best_seconds(train, device, args.repeats)
        row["train docs/s"] = docs / seconds
        row["train peak"] = peak_bytes(train, device)
        module.eval()
        score()
        row["score docs/s"] = docs / best_seconds(score, device, args.repeats)
        row["score peak"] = peak_bytes(score, device)
        rows.append(row)
        print(row, flush=True)
        if seconds > args.max_seconds:
            stopped = f"one training call took {seconds:.0f} s at L = {length}"
    return rows


def mslr_epoch(fraction: float, data: Path | None = None) -> dict:
    """One training epoch through the trainer train.py builds (its callbacks and loggers), on
    the MSLR-WEB30K-shaped text at ``fraction`` written to ``data``."""
    from data_path import write_set
    from epoch_overhead import lightning_epoch, train_py_trainer

    from differank.datamodules.letor import LetorDataModule

    data = data or Path(f"/tmp/differank-mslr-{fraction:g}")
    write_set(data, fraction, seed=0)
    dm = LetorDataModule(data, batch_size=32, cache_dir=data / "cache")
    dm.setup()
    module, _ = build_module("linear", "domination", dm.n_features)
    timing = lightning_epoch(dm, module, train_py_trainer)
    queries = dm.dataset("train")
    docs = int(queries.lengths.sum())
    return {"docs": docs, "queries": len(queries), **timing}


def mib(value: int) -> str:
    return "-" if value < 0 else f"{value / 2**20:,.1f}"


def table(rows: list[dict], device: str) -> str:
    lines = [
        f"| objective | scorer | compiled | L | B | train docs/s ({device}) | train peak MiB "
        "| score docs/s | score peak MiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        head = f"| {row['objective']} | {row['scorer']} | {'yes' if row['compiled'] else 'no'} "
        if "skipped" in row:
            lines.append(f"{head}| {row['L']} | - | skipped: {row['skipped']} | | | |")
            continue
        lines.append(
            f"{head}| {row['L']} | {row['B']} | {row['train docs/s']:,.0f} | "
            f"{mib(row['train peak'])} | {row['score docs/s']:,.0f} | {mib(row['score peak'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--objectives", nargs="*", default=list(OBJECTIVES))
    parser.add_argument("--scorers", nargs="*", default=list(SCORERS))
    parser.add_argument("--lengths", nargs="*", type=int, default=list(LENGTHS))
    parser.add_argument("--docs", type=int, default=8192, help="documents per batch (B x L)")
    parser.add_argument("--features", type=int, default=N_FEATURES)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=5.0)
    parser.add_argument("--compile", action="store_true", help="also rows under torch.compile")
    parser.add_argument("--fraction", type=float, default=0.125, help="MSLR-shaped epoch scale")
    parser.add_argument("--data", type=Path, help="where the epoch's text goes (default /tmp/...)")
    parser.add_argument("--no-epoch", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="smoke mode")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.tiny:
        args.lengths, args.docs, args.features, args.repeats = [8, 16], 64, 8, 1
        args.objectives, args.scorers, args.fraction = ["domination", "cone"], ["linear"], 0.002
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    rows = []
    for objective in args.objectives:
        scorers = ["conerank"] if objective == "cone" else args.scorers
        for scorer in scorers:
            for compiled in (False, True) if args.compile else (False,):
                rows += scan(objective, scorer, args, device, compiled)
    text = (
        f"Documents per second (B x L / the fastest of {args.repeats} calls after a warm-up) "
        f"and peak memory; F = {args.features}, about {args.docs} documents per batch; "
        f"{'CPU, 1 torch thread, process CPU time' if device.type == 'cpu' else device}.\n\n"
        + table(rows, device.type)
    )
    if not args.no_epoch:
        epoch = mslr_epoch(args.fraction, args.data)
        text += (
            f"\nMSLR-WEB30K-shaped training epoch at fraction {args.fraction:g} (train.py's "
            "trainer, model=linear loss=domination, batch 32, warm cache): "
            f"{epoch['queries']:,} queries, "
            f"{epoch['docs']:,} documents in {epoch['epoch wall']:.2f} s wall "
            f"({epoch['docs'] / epoch['epoch wall']:,.0f} docs/s; CPU time {epoch['epoch']:.2f} "
            f"s, {epoch['docs'] / epoch['epoch']:,.0f} docs/s).\n"
        )
    measure.publish(text, args.out, args.device)


if __name__ == "__main__":
    main()

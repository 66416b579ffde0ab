"""Cone loss forward+backward: the exact active-set fold-in against FISTA, and the default loss
against the domination loss, in one run.

For each list length L, on one batch of B queries (F features, K basis vectors, labels in
MQ2008's proportions 0: 74 %, 1: 19 %, 2: 7 %, standard normal features, ConeRank's initial
basis), one training step (loss and its backward to U and the features) of:

* ``fista``: every pair, ``solver="fista"`` (tol 1e-7, at most 500 iterations: the previous
  default);
* ``active set``: every pair, ``solver="active_set"`` (the default solver);
* ``default``: :class:`differank.losses.cone.ConeLoss` exactly as ``conf/loss/cone.yaml`` builds it;
* ``domination``: the domination loss (``conf/loss/domination.yaml``) of a linear scorer's
  scores on the same batch (the scorer's product and its backward included).

Agreement: the largest relative difference per query between each all-pairs loss and a tight
float64 reference (FISTA in float64 to tol 1e-12, at most 20,000 iterations: an independent
algorithm). Peak memory: the growth of the peak resident set (VmHWM) during one step, in a fresh
subprocess (Linux, CPU) or ``torch.cuda.max_memory_allocated``.

    python benchmarks/cone_throughput.py [--device cuda] [--lengths 16 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import measure
import torch
from omegaconf import OmegaConf

from differank.losses.cone import ConeLoss, cone_loss
from differank.losses.domination import DominationLoss
from differank.rankers.scorers.conerank import ConeRank

CONF = Path(__file__).resolve().parents[1] / "conf" / "loss"


def config_loss(name: str):
    """The loss module that ``conf/loss/<name>.yaml`` builds (its keys are the module's)."""
    options = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))
    options.pop("_target_")
    return {"cone": ConeLoss, "domination": DominationLoss}[name](**options)


def make_batch(batch, length, n_features, n_basis, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    draw = torch.rand(batch, length, generator=g)
    labels = (draw > 0.74).float() + (draw > 0.93).float()
    features = torch.randn(batch, length, n_features, generator=g)
    mask = torch.ones(batch, length, dtype=torch.bool)
    basis = ConeRank(n_features, n_basis=n_basis, seed=seed).basis.detach()  # the training start
    return tuple(t.to(device) for t in (features, labels, mask, basis))


# the solvers compared on every pair (the loss's default draws 64 pairs per query)
EVERY_PAIR = {"max_pairs_per_query": None}


def cone_step(features, labels, mask, basis, loss):
    f = features.detach().requires_grad_(True)
    u = basis.detach().requires_grad_(True)
    loss(f, labels, mask, u).backward()


def domination_step(features, labels, mask, basis, loss):
    f = features.detach().requires_grad_(True)
    weight = basis[:, 0].detach().clone().requires_grad_(True)  # any linear scorer
    loss(f @ weight, labels, mask).backward()


def steps():
    """The compared steps by name (built on demand: the default reads its config file)."""
    return {
        "fista": partial(cone_step, loss=ConeLoss(solver="fista", **EVERY_PAIR)),
        "active_set": partial(cone_step, loss=ConeLoss(solver="active_set", **EVERY_PAIR)),
        "default": partial(cone_step, loss=config_loss("cone")),
        "domination": partial(domination_step, loss=config_loss("domination")),
    }


def timed(fn, repeats, device):
    """Median wall-clock milliseconds per call, after a warm-up."""
    return measure.median_seconds(fn, repeats, time.perf_counter, device) * 1e3


def agreement(features, labels, mask, basis):
    """Largest relative per-query difference of the all-pairs losses from the float64 one."""
    wide = [t.double() if t.is_floating_point() else t for t in (features, labels, mask, basis)]
    reference = cone_loss(*wide, solver="fista", tol=1e-12, max_iter=20000, reduction="none",
                          **EVERY_PAIR)  # fmt: skip
    valid = reference > 0  # queries with at least one pair
    out = {}
    for solver in ("fista", "active_set"):
        value = cone_loss(features, labels, mask, basis, solver=solver, reduction="none",
                          **EVERY_PAIR)  # fmt: skip
        difference = (value.double() - reference).abs() / reference.clamp(min=1e-300)
        out[solver] = float(difference[valid].max()) if bool(valid.any()) else 0.0
    return out


def peak_bytes(step_name, args, length, device):
    """Peak memory of one step (see the module docstring)."""
    if device.type == "cuda":
        inputs = make_batch(args.batch, length, args.features, args.basis, device)
        return measure.cuda_peak_bytes(partial(steps()[step_name], *inputs), device)
    command = [sys.executable, __file__, "--probe", step_name, "--lengths", str(length),
               "--batch", str(args.batch), "--features", str(args.features),
               "--basis", str(args.basis)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(result.stdout.strip().splitlines()[-1])


def probe(step_name, args) -> None:
    """Subprocess side of :func:`peak_bytes`: print the peak-RSS growth of one step (bytes)."""
    inputs = make_batch(args.batch, args.lengths[0], args.features, args.basis, "cpu")
    step = steps()[step_name]
    step(*inputs)  # warm-up
    print(measure.rss_peak_bytes(partial(step, *inputs)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--features", type=int, default=46)
    parser.add_argument("--basis", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory probes")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        return probe(args.probe, args)
    device = torch.device(args.device)
    default = OmegaConf.load(CONF / "cone.yaml")
    print(
        f"device={device}, torch threads={torch.get_num_threads()}, B={args.batch}, "
        f"F={args.features}, K={args.basis}; forward+backward ms, median of {args.repeats}; "
        f"default = conf/loss/cone.yaml (solver {default.solver}, max_pairs_per_query "
        f"{default.max_pairs_per_query})\n"
    )
    print("| L | pairs | fista (ms) | active set (ms) | fista / active set | default (ms) "
          "| domination (ms) | default / domination | rel. diff. fista, active set "
          "| peak MiB fista, active set, default |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    compared = steps()
    for length in args.lengths:
        inputs = make_batch(args.batch, length, args.features, args.basis, device)
        labels, mask = inputs[1], inputs[2]
        pairs = int(((labels.unsqueeze(-1) > labels.unsqueeze(-2)) & mask.unsqueeze(-1)).sum())
        ms = {name: timed(partial(step, *inputs), args.repeats, device)
              for name, step in compared.items()}  # fmt: skip
        close = agreement(*inputs)
        if args.no_memory:
            memory = "—"
        else:
            memory = ", ".join(
                f"{peak_bytes(name, args, length, device) / 2**20:.0f}"
                for name in ("fista", "active_set", "default")
            )
        print(
            f"| {length} | {pairs} | {ms['fista']:.1f} | {ms['active_set']:.1f} | "
            f"{ms['fista'] / ms['active_set']:.1f}x | {ms['default']:.1f} | "
            f"{ms['domination']:.2f} | {ms['default'] / ms['domination']:.1f}x | "
            f"{close['fista']:.1e}, {close['active_set']:.1e} | {memory} |",
            flush=True,
        )
    print("\n" + measure.metadata_line(measure.run_metadata(device)), end="")


if __name__ == "__main__":
    main()

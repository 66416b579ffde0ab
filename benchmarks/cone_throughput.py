"""Fold-in + cone loss forward/backward throughput: batched vs a per-query loop (SPEC §2.6).

Times one training step of ``cone_loss`` (pair extraction, eq. 5 normalisation, the FISTA
fold-in of every pair to tol 1e-7, the residual loss and its backward to U and the features)
on a batch of B queries with L documents each, F features and K basis vectors, two ways in the
same run: the batched call on the whole batch, and a Python loop calling the same function on one
query at a time. Labels follow MQ2008's proportions (0: 74 %, 1: 19 %, 2: 7 %), features are
standard normal, U is ConeRank's initial basis (uniform in the ball of radius 2·sqrt(F)).
Peak memory of one step: on CPU the growth of the process's peak resident set (VmHWM, reset
through ``/proc/self/clear_refs`` just before the step) over its resident size then, in a fresh
subprocess after a warm-up step (Linux only; allocator caching included); on CUDA
``torch.cuda.max_memory_allocated``. The loop's memory is one query's step.

    python benchmarks/cone_throughput.py [--device cuda] [--lengths 16 128 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from losses.cone import cone_loss  # noqa: E402
from rankers.conerank import ConeRank  # noqa: E402


def make_batch(batch, length, n_features, n_basis, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    draw = torch.rand(batch, length, generator=g)
    labels = (draw > 0.74).float() + (draw > 0.93).float()
    features = torch.randn(batch, length, n_features, generator=g)
    mask = torch.ones(batch, length, dtype=torch.bool)
    basis = ConeRank(n_features, n_basis=n_basis, seed=seed).basis.detach()  # the training start
    move = lambda t: t.to(device)  # noqa: E731
    return move(features), move(labels), move(mask), move(basis)


def step_batched(features, labels, mask, basis):
    f = features.detach().requires_grad_(True)
    u = basis.detach().requires_grad_(True)
    cone_loss(f, labels, mask, u).backward()


def step_per_query(features, labels, mask, basis, queries=None):
    """The baseline: the same function on one query at a time, backward per query (gradients
    accumulate, so memory is one query's). ``queries`` limits the loop (memory probe)."""
    f = features.detach().requires_grad_(True)
    u = basis.detach().requires_grad_(True)
    count = features.shape[0]
    for b in range(count if queries is None else queries):
        one = cone_loss(f[b : b + 1], labels[b : b + 1], mask[b : b + 1], u)
        (one / count).backward()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats, device):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def peak_bytes(step_name, args, length, device):
    """Peak memory of one step: CUDA allocator stats, or on CPU the growth of the peak resident
    set over the resident size before the step, in a fresh subprocess (see :func:`probe`)."""
    if device.type == "cuda":
        inputs = make_batch(args.batch, length, args.features, args.basis, device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        STEPS[step_name](*inputs)
        return torch.cuda.max_memory_allocated(device) - base
    command = [sys.executable, __file__, "--probe", step_name, "--lengths", str(length),
               "--batch", str(args.batch), "--features", str(args.features),
               "--basis", str(args.basis)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(result.stdout.strip().splitlines()[-1])


def probe(step_name, args) -> None:
    """Subprocess side of :func:`peak_bytes`: print the peak-RSS growth of one step (bytes)."""
    inputs = make_batch(args.batch, args.lengths[0], args.features, args.basis, "cpu")
    STEPS[step_name](*inputs, **({"queries": 1} if step_name == "loop" else {}))  # warm-up
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset the peak resident set (VmHWM) to the current one
    before = _status_bytes("VmRSS")
    STEPS[step_name](*inputs, **({"queries": 1} if step_name == "loop" else {}))
    print(_status_bytes("VmHWM") - before)


STEPS = {"batched": step_batched, "loop": step_per_query}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 128, 512])
    parser.add_argument("--features", type=int, default=46)
    parser.add_argument("--basis", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probe", choices=sorted(STEPS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        return probe(args.probe, args)
    device = torch.device(args.device)
    memory_method = (
        "torch.cuda.max_memory_allocated"
        if device.type == "cuda"
        else "growth of the peak RSS (VmHWM) during one step, in a fresh process"
    )
    print(
        f"device={device}, torch threads={torch.get_num_threads()}, B={args.batch}, "
        f"F={args.features}, K={args.basis}, FISTA tol 1e-7 (max 500 it.), median of "
        f"{args.repeats}; peak memory: {memory_method}\n"
    )
    print("| B | L | pairs | batched fwd+bwd (ms) | per-query loop (ms) | loop / batched "
          "| batched peak memory (MiB) | loop peak memory, one query (MiB) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for length in args.lengths:
        features, labels, mask, basis = make_batch(
            args.batch, length, args.features, args.basis, device
        )
        pairs = int(((labels.unsqueeze(-1) > labels.unsqueeze(-2)) & mask.unsqueeze(-1)).sum())
        inputs = (features, labels, mask, basis)
        batched = timed(partial(step_batched, *inputs), args.repeats, device)
        loop = timed(partial(step_per_query, *inputs), max(1, args.repeats // 2), device)
        mem_batched = peak_bytes("batched", args, length, device) / 2**20
        mem_loop = peak_bytes("loop", args, length, device) / 2**20
        print(
            f"| {args.batch} | {length} | {pairs} | {batched:.1f} | {loop:.1f} | "
            f"{loop / batched:.1f}x | {mem_batched:.1f} | {mem_loop:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Domination loss forward+backward: closed form vs the dense [B, L, L] form vs a per-query loop.

    python benchmarks/domination_throughput.py [--batch 64] [--lengths 16 128 1024] [--device cpu]

Prints a markdown table of best-of-n times and peak memory. On CPU the peak is the rise of the
resident set (``VmHWM`` after resetting it through ``/proc/self/clear_refs``; Linux only),
measured in a child process started with ``MALLOC_MMAP_THRESHOLD_=4096`` so that every tensor
of 4 KiB or more is mapped and unmapped on its own and the resident set follows live tensors;
on CUDA it is ``torch.cuda.max_memory_allocated``. The dense form is the same loss with an
all-zero [B, L, L] margin tensor (a masked log-sum-exp over every pair); the loop computes each
query's O(n²) pairwise log-sum-exp in a Python loop over queries.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import measure
import torch

from differank.losses.domination import domination_loss


def closed_form(scores, labels, mask):
    return domination_loss(scores, labels, mask, reduction="sum")


def dense(scores, labels, mask):
    zeros = scores.new_zeros(*scores.shape, scores.shape[-1])
    return domination_loss(scores, labels, mask, margins=zeros, reduction="sum")


def loop(scores, labels, mask):
    total = scores.new_zeros(())
    for b in range(scores.shape[0]):
        s, r = scores[b][mask[b]], labels[b][mask[b]]
        below = r.unsqueeze(0) < r.unsqueeze(1)  # below[i, j]: j ∈ D(i)
        has = below.any(dim=1)
        if not bool(has.any()):
            continue
        pair = torch.where(below, s.unsqueeze(0) - s.unsqueeze(1), float("-inf"))
        lse = torch.logsumexp(pair[has], dim=1)
        total = total + torch.nn.functional.softplus(lse).sum()
    return total


def best_seconds(fn, device: torch.device, repeats: int) -> float:
    """Best of n wall-clock calls after a warm-up: the machine is shared, noise only ever adds
    time."""
    return measure.best_seconds(fn, repeats, time.perf_counter, device)


def make_batch(batch: int, length: int, device: torch.device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, length, generator=g)
    labels = torch.randint(0, 3, (batch, length), generator=g).float()
    sizes = torch.randint(length // 2, length + 1, (batch, 1), generator=g)
    mask = torch.arange(length).unsqueeze(0) < sizes
    return scores.to(device), labels.to(device), mask.to(device)


METHODS = {"closed form": closed_form, "dense [B,L,L]": dense, "per-query loop": loop}


def make_step(method, scores, labels, mask):
    def step():
        leaf = scores.clone().requires_grad_(True)
        method(leaf, labels, mask).backward()
        return leaf.grad

    return step


def child_peak(method: str, batch: int, length: int) -> int:
    """Peak bytes of one forward+backward, measured in a fresh process (see module docstring)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "4096"}
    command = [
        sys.executable,
        __file__,
        "--child",
        method,
        "--batch",
        str(batch),
        "--lengths",
        str(length),
    ]
    return int(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="*", default=[16, 128, 1024])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.child:  # one memory measurement, printed for the parent
        step = make_step(METHODS[args.child], *make_batch(args.batch, args.lengths[0], device))
        step()
        print(min(measure.peak_bytes(step, device) for _ in range(3)))
        return
    print(
        f"B={args.batch}, labels in {{0,1,2}}, lists of L/2..L real documents, "
        f"float32, forward+backward, device={device}, threads={torch.get_num_threads()}\n"
    )
    print(
        "| L | closed form ms | dense ms | loop ms | dense/closed time | loop/closed time "
        "| closed peak MB | dense peak MB | loop peak MB | dense/closed memory |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for length in args.lengths:
        scores, labels, mask = make_batch(args.batch, length, device)
        times, peaks = {}, {}
        for name, method in METHODS.items():
            step = make_step(method, scores, labels, mask)
            times[name] = best_seconds(step, device, args.repeats)
            if device.type == "cuda":
                peaks[name] = max(measure.peak_bytes(step, device) for _ in range(2))
            else:
                peaks[name] = child_peak(name, args.batch, length)
        closed, den, lp = times["closed form"], times["dense [B,L,L]"], times["per-query loop"]
        resolved = peaks["closed form"] >= 16384
        ratio = f"{peaks['dense [B,L,L]'] / peaks['closed form']:.1f}x" if resolved else "n/a"
        mb = {k: v / 2**20 for k, v in peaks.items()}  # page-granular: 4 KiB resolution
        print(
            f"| {length} | {closed * 1e3:.3f} | {den * 1e3:.3f} | {lp * 1e3:.3f} | "
            f"{den / closed:.1f}x | {lp / closed:.1f}x | {mb['closed form']:.2f} | "
            f"{mb['dense [B,L,L]']:.2f} | {mb['per-query loop']:.2f} | "
            f"{ratio} |"
        )
    print("\n" + measure.metadata_line(measure.run_metadata(device)), end="")


if __name__ == "__main__":
    main()

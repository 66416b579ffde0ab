"""ListNet's cost against a plain masked softmax cross-entropy: is an O(L) loss dominated by the
input rule's checks?

The reference is allRank's ``listNet`` written inline from its formula (allRank is not a
dependency): padding marked by the label -1, both softmaxes over the real documents, ``eps =
1e-10`` inside the log, the mean over queries. differank's ``listnet_loss`` gets the same
tensors and ``mask = labels >= 0``, built once outside the timed step. Each timed step is a
forward and a backward on CPU; the two run interleaved and each reports its fastest of
``--repeats`` rounds (noise on a shared machine only adds time). Writes
``benchmarks/results/listwise_overhead.md``.

    python benchmarks/listwise_overhead.py --repeats 200
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import measure
import torch

from differank.losses import listnet_loss

RESULT = Path(__file__).resolve().parent / "results" / "listwise_overhead.md"
PADDED = -1


def allrank_listnet(scores: torch.Tensor, labels: torch.Tensor, eps: float = 1e-10):
    """allRank's listNet: softmax of the scores vs softmax of the labels, -1 marks padding."""
    padding = labels == PADDED
    scores = scores.masked_fill(padding, float("-inf"))
    labels = labels.masked_fill(padding, float("-inf"))
    predicted = torch.softmax(scores, dim=1) + eps
    target = torch.softmax(labels, dim=1)
    return torch.mean(-torch.sum(target * torch.log(predicted), dim=1))


def batch(size: int, length: int, seed: int = 0):
    """Scores, graded labels 0..4 with the last quarter of every other list padded (-1)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(size, length, generator=g)
    labels = torch.randint(0, 5, (size, length), generator=g).float()
    labels[::2, length - length // 4 :] = PADDED
    return scores, labels


def fastest_ms(steps: dict, repeats: int) -> dict[str, float]:
    """Each step's fastest of ``repeats`` interleaved calls, in milliseconds."""
    best = dict.fromkeys(steps, float("inf"))
    for step in steps.values():
        step()  # warm-up
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: seconds * 1e3 for name, seconds in best.items()}


def rows(size: int, lengths: list[int], repeats: int):
    for length in lengths:
        scores, labels = batch(size, length)
        mask = labels >= 0
        leaf = scores.requires_grad_(True)

        def differank(leaf=leaf, labels=labels, mask=mask):
            listnet_loss(leaf, labels, mask).backward()

        def reference(leaf=leaf, labels=labels):
            allrank_listnet(leaf, labels).backward()

        ms = fastest_ms({"differank": differank, "reference": reference}, repeats)
        yield length, ms["differank"], ms["reference"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 128, 1024])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args()
    lines = [
        f"# ListNet vs a masked softmax cross-entropy (allRank's listNet), B = {args.batch}",
        "",
        f"Command: `python benchmarks/listwise_overhead.py --repeats {args.repeats}`",
        "",
        "Forward + backward on CPU, fastest of the interleaved repeats, milliseconds.",
        "",
        "| L | differank listnet_loss ms | reference ms | ratio |",
        "|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for length, ours, theirs in rows(args.batch, args.lengths, args.repeats):
        line = f"| {length} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f}x |"
        print(line, flush=True)
        lines.append(line)
    measure.publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()

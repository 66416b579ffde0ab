"""differank's standard objectives beside allRank 1.4.3's: numerical agreement and speed, in one
process (docs/objectives/standard.md#against-allrank).

    python benchmarks/allrank_side_by_side.py [--lengths 16 128 1024] [--out FILE]

allRank is a manual, optional install: its setup.py pins torch<=1.8, so install the package alone,
``python -m pip install --no-deps allRank==1.4.3``. Without it this script prints why and exits 0.
allRank's loss modules import two names from modules that need torchvision and gcsfs (its data
loader's ``PADDED_Y_VALUE = -1`` and ``get_torch_device``); when those packages are absent the
script provides the two names itself, so the loss code that runs is allRank's own.

Agreement: per query, on random float32 batches with label ties (labels 0..4), short lists
(1..L real documents) and padding at the end (allRank's layout: label -1), each allRank loss is
called on one query at a time (its reductions and Sinkhorn stopping are per batch) and compared
with differank's ``reduction="none"``: value ``|a - b| / |b|``, gradient
``max_i |∂a/∂s_i - ∂b/∂s_i| / max_i |∂b/∂s_i|``; the worst query is reported. Only queries with
two distinct labels are compared (differank gives the others 0; see the differences below).

Speed: forward + backward of a batch of B = 64 full lists, float32, on the CPU with one torch
thread, process CPU time, the minimum of interleaved repeats (differank, allRank, differank, ...).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
import types
from pathlib import Path

import measure
import torch

from differank.losses import (
    approx_ndcg_loss,
    lambda_loss,
    listmle_loss,
    listnet_loss,
    neural_ndcg_loss,
    ordinal_loss,
    ranknet_loss,
    softmax_loss,
)

OUT = measure.ROOT / "benchmarks" / "results" / "allrank_side_by_side.md"
BATCH = 64
REPEATS = {16: 20, 128: 8, 1024: 2}  # at least; a fast loss repeats for REPEAT_SECONDS
REPEAT_SECONDS, MAX_REPEATS = 1.0, 2000
LAMBDA_SCHEMES = {  # differank's weighting -> allRank's weighing_scheme
    "ndcgLoss1": "ndcgLoss1_scheme",
    "ndcgLoss2": "ndcgLoss2_scheme",
    "ndcgLoss2++": "ndcgLoss2PP_scheme",
    "lambdaRank": "lambdaRank_scheme",
    "rankNet": "rankNet_scheme",
    "rankNetWeightedByGTDiff": "rankNetWeightedByGTDiff_scheme",
    "rankNetWeightedByGTDiffPowed": "rankNetWeightedByGTDiffPowed_scheme",
}
DIFFERENCES = [
    "Queries without two distinct labels (one document, all labels equal) have loss 0 and "
    "leave the mean's denominator (the loss contract); allRank counts them in ApproxNDCG's, "
    "ListMLE's and NeuralNDCG's batch means and gives them a non-zero ListMLE, and "
    "ndcgLoss1 loss when their labels are equal and positive.",
    "Reductions: differank's default is the mean over valid queries of the per-query loss; "
    "allRank's lambdaLoss sums over the batch (differank's reduction='sum'), approxNDCG, "
    "neuralNDCG and listMLE average over all queries of the batch.",
    "Padding is a boolean mask and padded slots are never read; allRank marks padding by the "
    "label -1 (a real label of -1 is padding there) and its NeuralNDCG assumes padding at the "
    "end; its stochastic NeuralSort shifts scores by the batch minimum, padding included "
    "(differank: each query's real minimum).",
    "Sinkhorn stops per query (at the same tolerance, 1e-6, at most 50 iterations); allRank "
    "stops when every query of the batch has converged, so a query's result depends on its "
    "batch (by less than the tolerance). Here allRank is called one query at a time.",
    "NeuralNDCG-Transposed with powered_relevancies=False: allRank's ideal DCG still uses "
    "2^l - 1 gains; differank uses the linear gains in both.",
    "LambdaLoss with equal scores: differank keeps index order (stable sort), allRank's "
    "torch.sort leaves it unspecified (the weights depend on the positions).",
    "ListMLE ties: both order equal labels at random on each call, from different random "
    "draws, so agreement is measured on labels without ties.",
    "allRank computes rank discounts in float32 even for float64 inputs (differank: the "
    "inputs' dtype); float32 is compared here.",
    "ordinal: allRank's model outputs n probabilities per document; differank's one score "
    "gives them as sigmoid(s - theta_k), theta_k = k - 1/2, so allRank is called on exactly "
    "those probabilities. allRank averages over the batch's documents, differank over each "
    "query's documents, then over the queries; allRank's BCELoss clamps log p at -100, "
    "differank's BCE on logits does not saturate.",
    "listNet: allRank adds 1e-10 to the probabilities inside the log (a 1e-10 relative "
    "difference). allRank has no softmax loss (label-proportional targets): differank's "
    "softmax_loss is timed against allRank's listNet, the same O(L) softmax cross-entropy.",
]
ORDINAL_LEVELS = 4  # labels 0..4 in every batch here


def load_allrank():
    """allRank's ``allrank.models.losses``, or None when allRank is not installed."""
    if importlib.util.find_spec("allrank") is None:
        return None
    try:
        return importlib.import_module("allrank.models.losses")
    except ModuleNotFoundError:  # torchvision / gcsfs behind its data loader and model utils
        loading = types.ModuleType("allrank.data.dataset_loading")
        loading.PADDED_Y_VALUE = -1
        utils = types.ModuleType("allrank.models.model_utils")
        utils.get_torch_device = lambda: torch.device("cpu")
        sys.modules["allrank.data.dataset_loading"] = loading
        sys.modules["allrank.models.model_utils"] = utils
        for name in [name for name in sys.modules if name.startswith("allrank.models.losses")]:
            del sys.modules[name]
        return importlib.import_module("allrank.models.losses")


def pairs(allrank):
    """(name, differank per-query loss, allRank loss of a batch, tie-free labels?)."""
    cases = []
    for weighting, scheme in LAMBDA_SCHEMES.items():
        for k in (None, 5):
            cases.append(
                (
                    f"lambdaLoss {weighting}" + (f" k={k}" if k else ""),
                    lambda s, y, m, w=weighting, k=k: lambda_loss(
                        s, y, m, weighting=w, k=k, reduction="none"
                    ),
                    lambda s, y, scheme=scheme, k=k: allrank.lambdaLoss(
                        s, y, weighing_scheme=scheme, k=k
                    ),
                    False,
                )
            )
    cases.append(
        (
            "approxNDCG",
            lambda s, y, m: approx_ndcg_loss(s, y, m, reduction="none"),
            lambda s, y: allrank.approxNDCGLoss(s, y),
            False,
        )
    )
    for transposed in (False, True):
        for k in (None, 5):
            function = allrank.neuralNDCG_transposed if transposed else allrank.neuralNDCG
            cases.append(
                (
                    "neuralNDCG" + (" transposed" if transposed else "") + (f" k={k}" if k else ""),
                    lambda s, y, m, t=transposed, k=k: neural_ndcg_loss(
                        s, y, m, transposed=t, k=k, reduction="none"
                    ),
                    lambda s, y, f=function, k=k: f(s, y, k=k),
                    False,
                )
            )
    cases.append(
        (
            "listMLE",
            lambda s, y, m: listmle_loss(s, y, m, reduction="none"),
            lambda s, y: allrank.listMLE(s, y),
            True,
        )
    )
    cases.append(
        (
            "listNet",
            lambda s, y, m: listnet_loss(s, y, m, reduction="none"),
            lambda s, y: allrank.listNet(s, y),
            False,
        )
    )
    cases.append(
        (
            "rankNet",
            lambda s, y, m: ranknet_loss(s, y, m, reduction="none"),
            lambda s, y: allrank.rankNet(s, y),
            False,
        )
    )
    cases.append(
        (
            "ordinal",
            lambda s, y, m: ordinal_loss(s, y, m, n=ORDINAL_LEVELS, reduction="none"),
            lambda s, y: allrank_ordinal(allrank, s, y),
            False,
        )
    )
    return cases


def allrank_ordinal(allrank, scores, labels):
    """allRank's ordinal on the n probabilities differank's one score gives, σ(s - (k - 1/2)),
    of the real documents: its padding targets (-1) are outside the [0, 1] today's BCELoss
    accepts, so the padding at the end of the rows is cut off (rows of one length)."""
    length = int((labels >= 0).sum(dim=-1).max())
    theta = torch.arange(ORDINAL_LEVELS, dtype=scores.dtype) + 0.5
    probabilities = torch.sigmoid(scores[:, :length].unsqueeze(-1) - theta)
    return allrank.ordinal(probabilities, labels[:, :length], ORDINAL_LEVELS)


def agreement_batch(seed: int, length: int, tie_free: bool):
    g = torch.Generator().manual_seed(seed)
    batch = 24
    scores = torch.randn(batch, length, generator=g)
    labels = torch.randint(0, 5, (batch, length), generator=g).float()
    if tie_free:
        labels = labels + torch.rand(batch, length, generator=g)
    sizes = torch.randint(1, length + 1, (batch,), generator=g)
    mask = torch.arange(length) < sizes.unsqueeze(-1)
    return scores, labels, mask


def agreement(allrank, lengths=(8, 40), seeds=(0, 1)) -> list[tuple[str, float, float, int]]:
    rows = []
    for name, ours, theirs, tie_free in pairs(allrank):
        worst_value = worst_gradient = 0.0
        compared = 0
        for length in lengths:
            for seed in seeds:
                scores, labels, mask = agreement_batch(seed, length, tie_free)
                leaf = scores.clone().requires_grad_(True)
                value = ours(leaf, labels, mask)
                value.sum().backward()
                padded_labels = torch.where(mask, labels, -1.0)
                for b in range(scores.shape[0]):
                    real = labels[b][mask[b]]
                    if real.numel() < 2 or bool((real == real[0]).all()):
                        continue  # not a valid query: differank's 0 (see the differences)
                    row = scores[b : b + 1].clone().requires_grad_(True)
                    reference = theirs(row, padded_labels[b : b + 1])
                    reference.backward()
                    keep = mask[b]
                    worst_value = max(
                        worst_value,
                        abs(float(value[b].detach()) - float(reference.detach()))
                        / max(abs(float(reference.detach())), 1e-12),
                    )
                    want = row.grad[0, keep]
                    scale = max(float(want.abs().max()), 1e-12)
                    worst_gradient = max(
                        worst_gradient, float((leaf.grad[b, keep] - want).abs().max()) / scale
                    )
                    compared += 1
        rows.append((name, worst_value, worst_gradient, compared))
    return rows


TIMED = {  # name -> (differank, allRank)
    "lambdaLoss NDCGLoss2++": (
        lambda a, s, y, m: lambda_loss(s, y, m, reduction="sum"),
        lambda a, s, y, m: a.lambdaLoss(s, y, weighing_scheme="ndcgLoss2PP_scheme"),
    ),
    "approxNDCG": (
        lambda a, s, y, m: approx_ndcg_loss(s, y, m),
        lambda a, s, y, m: a.approxNDCGLoss(s, y),
    ),
    "neuralNDCG": (
        lambda a, s, y, m: neural_ndcg_loss(s, y, m),
        lambda a, s, y, m: a.neuralNDCG(s, y),
    ),
    "listMLE": (
        lambda a, s, y, m: listmle_loss(s, y, m),
        lambda a, s, y, m: a.listMLE(s, y),
    ),
    "listNet": (
        lambda a, s, y, m: listnet_loss(s, y, m),
        lambda a, s, y, m: a.listNet(s, y),
    ),
    "softmax (allRank: listNet)": (
        lambda a, s, y, m: softmax_loss(s, y, m),
        lambda a, s, y, m: a.listNet(s, y),
    ),
    "rankNet": (
        lambda a, s, y, m: ranknet_loss(s, y, m),
        lambda a, s, y, m: a.rankNet(s, y),
    ),
    "ordinal": (
        lambda a, s, y, m: ordinal_loss(s, y, m, n=ORDINAL_LEVELS),
        lambda a, s, y, m: allrank_ordinal(a, s, y),
    ),
}
# allRank's NeuralNDCG keeps every Sinkhorn iteration's [B, L, L] matrices for the backward
# pass: at L = 1024 that is tens of GB; its rankNet indexes a Python list of all L² pairs into
# [B, L², 2] tensors (several GB at L = 1024): neither is run there
SKIP_ALLRANK = {("neuralNDCG", 1024), ("rankNet", 1024)}


def timings(allrank, lengths) -> list[tuple[str, int, float, float | None, float | None]]:
    rows = []
    for length in lengths:
        g = torch.Generator().manual_seed(length)
        scores = torch.randn(BATCH, length, generator=g)
        labels = torch.randint(0, 5, (BATCH, length), generator=g).float()
        mask = torch.ones(BATCH, length, dtype=torch.bool)
        for name, (ours, theirs) in TIMED.items():
            leaf = scores.clone().requires_grad_(True)

            def step(loss, leaf=leaf, labels=labels, mask=mask):
                leaf.grad = None
                loss(allrank, leaf, labels, mask).backward()

            run_theirs = (name, length) not in SKIP_ALLRANK
            peak = measure.rss_peak_bytes(lambda ours=ours: step(ours)) if length >= 1024 else None
            if run_theirs:
                step(theirs)  # warm-up
            once = measure.call_seconds(lambda ours=ours: step(ours), time.process_time)
            repeats = min(MAX_REPEATS, int(REPEAT_SECONDS / max(once, 1e-9)))
            best_ours = best_theirs = float("inf")
            for _ in range(max(REPEATS.get(length, 3), repeats)):
                best_ours = min(
                    best_ours, measure.call_seconds(lambda ours=ours: step(ours), time.process_time)
                )
                if run_theirs:
                    best_theirs = min(
                        best_theirs,
                        measure.call_seconds(lambda theirs=theirs: step(theirs), time.process_time),
                    )
            rows.append((name, length, best_ours, best_theirs if run_theirs else None, peak))
            print(f"  {name} L={length}: {best_ours * 1e3:.3g} ms", flush=True)
    return rows


def table(agreement_rows, timing_rows, command: str) -> str:
    lines = [
        "# differank vs allRank 1.4.3: agreement and speed",
        "",
        f"`{command}`",
        "",
        "## Agreement (float32, worst query; relative)",
        "",
        "| loss | value | gradient | queries |",
        "|---|---|---|---|",
    ]
    for name, value, gradient, count in agreement_rows:
        lines.append(f"| {name} | {value:.1e} | {gradient:.1e} | {count} |")
    lines += [
        "",
        f"## Forward + backward, B = {BATCH}, CPU, 1 thread (min of interleaved repeats)",
        "",
        "| loss | L | differank ms | allRank ms | speed-up | differank peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    for name, length, ours, theirs, peak in timing_rows:
        theirs_text = f"{theirs * 1e3:.3g}" if theirs is not None else "not run (memory)"
        ratio = f"{theirs / ours:.2f}x" if theirs is not None else "-"
        peak_text = f"{peak / 2**30:.2f} GiB" if peak is not None else "-"
        lines.append(
            f"| {name} | {length} | {ours * 1e3:.3g} | {theirs_text} | {ratio} | {peak_text} |"
        )
    lines += ["", "## Deliberate differences", ""]
    lines += [f"{n}. {text}" for n, text in enumerate(DIFFERENCES, start=1)]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 128, 1024])
    parser.add_argument("--no-timing", action="store_true", help="agreement only")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    allrank = load_allrank()
    if allrank is None:
        print(
            "allRank is not installed, nothing to compare: "
            "python -m pip install --no-deps allRank==1.4.3"
        )
        return 0
    torch.set_num_threads(1)
    agreement_rows = agreement(allrank)
    timing_rows = [] if args.no_timing else timings(allrank, args.lengths)
    command = "python benchmarks/allrank_side_by_side.py " + " ".join(argv or sys.argv[1:])
    measure.publish(table(agreement_rows, timing_rows, command.strip()), args.out, "cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

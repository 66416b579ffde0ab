"""Average the scores of several trained runs: an ensemble of checkpoints as one scorer.

    python -m differank.rankers.run.ensemble CKPT [CKPT ...] --out DIR
        [--weights W [W ...]] [--scores standardized|raw] [--files F [F ...]]
        [--data KEY=VALUE ...] [--ks 1 3 5 10] [--export FORMAT [FORMAT ...]]

Each checkpoint is rebuilt from the file alone (:func:`differank.load_ranker`: its allowlisted
config, weights and serving record) behind its own feature transform and z-score, so the
members read raw features and may have been trained with different ``data.transform`` /
``data.normalization`` settings (not ``query_minmax``). The ensemble scores ``--files`` (any
LETOR files), else the test split of the first member's data (raw features; ``--data
data.root=DIR`` and other ``data.*`` overrides change it), and writes what a run writes:
``DIR/predictions/test.{txt,sources,run,qrels}``, ``DIR/test_metrics.json``, plus
``DIR/ensemble.json`` (members, weights, scores), all together or (on an error) none of them:
weights must be finite, and a member whose scores are not finite is named. ``--export onnx
triton`` adds the ensemble as one served graph (raw features and mask in, the averaged scores
out) under ``DIR/export/``, in any of ``task=export``'s formats (docs/serving.md).

``ensemble.json`` is read back (the distillation teacher, ``teacher=ensemble``) by
:func:`read_record`, under the rules of every file differank reads: the record and each member
are regular files (a FIFO, a device, a directory or a dangling link is refused before it is
opened), the record at most ``MAX_RECORD_BYTES`` and a member no larger than the free memory
(a checkpoint is loaded whole).

By default each member's scores are standardised within each query (zero mean, unit variance
over the real documents) before the weighted mean (weights default to equal), so members whose
score scales differ (other losses or models) count as weighted. ``--scores raw`` averages them as
they are, and warns when the members' scales (mean per-query standard deviation) differ more
than ``SCALE_WARNING`` times: the mean is then mostly the largest-scale member.

Example:
    >>> from differank.rankers.checkpoints import Scorer
    >>> from differank.rankers.scorers.linear import LinearRanker
    >>> members = [Scorer(LinearRanker(2)), Scorer(LinearRanker(2))]
    >>> with torch.no_grad():
    ...     _ = members[0].ranker.linear.weight.fill_(1.0)
    ...     _ = members[1].ranker.linear.weight.fill_(3.0)
    >>> EnsembleRanker(members, standardize=False)(torch.ones(1, 2, 2)).tolist()
    [[4.0, 4.0]]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from torch import nn

from differank.datamodules.atomic_files import write_files
from differank.datamodules.reader import available_memory_bytes
from differank.datamodules.regular_files import require_regular_file
from differank.rankers.checkpoints import (
    Scorer,
    build,
    load_checkpoint,
    load_ranker,
    restored_config,
)
from differank.rankers.run.export_formats import EXPORT_FORMATS, ExportOptions, export_files
from differank.rankers.run.scoring import (
    prediction_files,
    read_letor_files,
    row_source,
    score_split,
)
from differank.rankers.scorers.base import Ranker

SCALE_WARNING = 10.0  # raw scores of members this many times apart in scale: warn
# An ensemble.json holds member paths and numbers: a larger file is not one of ours
MAX_RECORD_BYTES = 2**20


class EnsembleRanker(Ranker):
    """The weighted mean of member scorers' scores (raw features in, like an exported scorer).

    Args:
        members: scorers ``[B, L, F] -> [B, L]``, e.g.
        :class:`~differank.rankers.checkpoints.Scorer`; one with
            ``uses_mask`` is given the mask.
        weights: one per member, finite and non-negative, normalised to sum to 1 (None:
            equal).
        standardize: standardise each member's scores per query over the real documents first
            (default); False averages raw scores.

    Shape:
        features: [B, L, F], mask: bool [B, L] or None -> scores [B, L], 0 at padded slots.
    """

    uses_mask = True

    def __init__(
        self,
        members: Sequence[nn.Module],
        weights: Sequence[float] | None = None,
        standardize: bool = True,
    ) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        # a member's n_features is a plain int; nn.Module types unknown attributes as tensors
        widths = {int(member.n_features) for member in members}  # type: ignore[arg-type]
        if len(widths) != 1:
            raise ValueError(f"the members read different feature counts: {sorted(widths)}")
        weights = [1.0] * len(members) if weights is None else [float(w) for w in weights]
        usable = all(math.isfinite(w) and w >= 0 for w in weights) and sum(weights) > 0
        if len(weights) != len(members) or not usable:  # NaN fails every comparison: test it
            raise ValueError(
                f"weights must be {len(members)} finite non-negative numbers with a positive "
                f"sum, got {weights}"
            )
        self.members = nn.ModuleList(members)
        self.n_features = widths.pop()
        self.weights = tuple(w / sum(weights) for w in weights)
        self.standardize = bool(standardize)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is None:
            mask = torch.ones(features.shape[:-1], dtype=torch.bool, device=features.device)
        total = torch.zeros(features.shape[:-1], dtype=features.dtype, device=features.device)
        for weight, member in zip(self.weights, self.members, strict=True):
            uses_mask = getattr(member, "uses_mask", False)
            scores = member(features, mask) if uses_mask else member(features)
            scores = torch.where(mask, scores, 0.0)  # padding may score NaN: never averaged
            if self.standardize:
                scores = standardize_per_query(scores, mask)
            total = total + weight * scores
        return torch.where(mask, total, 0.0)


def standardize_per_query(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per query, ``(s - mean) / std`` over the real documents (std 0 -> centred only)."""
    count = mask.sum(dim=-1, keepdim=True).clamp(min=1)
    mean = scores.sum(dim=-1, keepdim=True) / count
    centred = torch.where(mask, scores - mean, 0.0)
    std = (centred.square().sum(dim=-1, keepdim=True) / count).sqrt()
    return centred / torch.where(std > 0, std, 1.0)


def _override(config: DictConfig, assignments: Sequence[str]) -> None:
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key.startswith("data."):
            raise ValueError(f"--data takes data.KEY=VALUE, got {assignment!r}")
        OmegaConf.update(config, key, yaml.safe_load(value), merge=True)


def member_file(path: str | Path, what: str) -> Path:
    """``path`` when it is a regular file that the free memory can hold (a checkpoint is loaded
    whole); a FIFO, a device, a directory or a dangling link is refused before it is opened."""
    return require_regular_file(path, what, max_bytes=available_memory_bytes())


def load_member(path: str | Path) -> Scorer:
    """The raw-feature scorer of a checkpoint written by ``train.py``, from the file alone (its
    allowlisted config, weights and serving record), in eval mode."""
    return load_ranker(member_file(path, "an ensemble member (a train.py checkpoint)"))


@dataclass(frozen=True)
class EnsembleRecord:
    """What an ``ensemble.json`` says: member checkpoints, their weights, the score mode."""

    checkpoints: list[Path]
    weights: list[float]
    standardize: bool


def read_record(path: str | Path) -> EnsembleRecord:
    """The ``ensemble.json`` this module's CLI wrote, checked: a regular file of at most
    ``MAX_RECORD_BYTES``, with ``checkpoints`` (each a regular file, see :func:`member_file`),
    ``weights`` and ``scores``; otherwise an error naming the file (and the member)."""
    path = require_regular_file(path, "an ensemble.json", max_bytes=MAX_RECORD_BYTES)
    try:
        record = json.loads(path.read_text())
        listed = record["checkpoints"]
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            raise TypeError(f"checkpoints must be a list of paths, got {listed!r:.200}")
        checkpoints = [Path(p) for p in listed]
        weights = [float(w) for w in record["weights"]]
        standardize = record.get("scores", "standardized") == "standardized"
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"{path} is not an ensemble.json of differank.rankers.run.ensemble "
            f"(checkpoints, weights, scores): {error}"
        ) from error
    for number, member in enumerate(checkpoints, start=1):
        member_file(member, f"member {number} of {path} (a train.py checkpoint)")
    return EnsembleRecord(checkpoints, weights, standardize)


def evaluation_data(
    path: str | Path, overrides: Sequence[str] = (), *, data_root: str | Path | None = None
):
    """The data module of the checkpoint's run with raw features (no transform, no
    normalization), ``overrides`` (``data.KEY=VALUE``) applied; built by the guarded builder.
    ``data_root``: the run's own data folder, when the caller knows it (restored_config)."""
    config = restored_config(load_checkpoint(path), path, data_root)  # checked, this machine's
    data = OmegaConf.create({"data": config["data"]})
    OmegaConf.update(data, "data.normalization", "none")
    OmegaConf.update(data, "data.transform", "none", force_add=True)
    _override(data, overrides)
    return build(OmegaConf.to_container(data.data, resolve=True), "data")


def member_scores(paths: Sequence[str], members: Sequence[nn.Module], split) -> list[torch.Tensor]:
    """Each member's scores of ``split`` (float64 [rows]); a member scoring a row NaN or
    infinite is refused, named with the row's file and line."""
    scores = []
    for number, (path, member) in enumerate(zip(paths, members, strict=True), start=1):
        values = score_split(member, split)
        bad = ~torch.isfinite(values)
        if bool(bad.any()):
            row = int(bad.nonzero()[0])
            raise ValueError(
                f"member {number} ({path}) scores row {row + 1} ({row_source(split, row)}) as "
                f"{values[row].item()}, not finite ({int(bad.sum())} of {len(values)} rows): "
                "check its weights; nothing is written"
            )
        scores.append(values)
    return scores


def score_scale(scores: torch.Tensor, split) -> float:
    """A member's score scale on ``split``: the mean over queries (of two or more documents)
    of the standard deviation of its ``scores``."""
    queries = [rows for rows in split.query_rows if len(rows) > 1]
    values = scores.numpy()
    return float(np.mean([values[rows].std() for rows in queries])) if queries else 0.0


def check_scales(paths: Sequence[str], scales: Sequence[float], standardize: bool) -> None:
    """Warn when raw scores of members on scales ``SCALE_WARNING`` times apart are averaged."""
    positive = [scale for scale in scales if scale > 0]
    if standardize or len(positive) < 2 or max(positive) < SCALE_WARNING * min(positive):
        return
    shown = ", ".join(f"{path}: {scale:.4g}" for path, scale in zip(paths, scales, strict=True))
    warnings.warn(
        f"averaging raw scores of members whose scales differ {max(positive) / min(positive):.0f}"
        f"x ({shown}; mean per-query std): the ensemble is mostly the largest-scale member. "
        "Drop --scores raw to standardise each member's scores per query first",
        stacklevel=2,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m differank.rankers.run.ensemble",
        description="Average the test scores of several checkpoints; write predictions and "
        "LETOR metrics like a run.",
    )
    parser.add_argument("checkpoints", nargs="+", metavar="CKPT")
    parser.add_argument("--out", type=Path, required=True, help="folder for the outputs")
    parser.add_argument("--weights", nargs="+", type=float, default=None)
    parser.add_argument(
        "--scores",
        choices=("standardized", "raw"),
        default="standardized",
        help="standardized (default): per-query z-score of each member first; raw: as they are",
    )
    parser.add_argument("--files", nargs="+", default=None, help="LETOR files to score")
    parser.add_argument(
        "--data",
        nargs="+",
        default=[],
        metavar="data.KEY=VALUE",
        help="overrides of the evaluation data (the first checkpoint's)",
    )
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 3, 5, 10])
    parser.add_argument(
        "--export",
        nargs="+",
        default=[],
        choices=sorted(EXPORT_FORMATS),
        help="also write the ensemble as one scorer in these formats under OUT/export/",
    )
    args = parser.parse_args(argv)
    standardize = args.scores == "standardized"
    try:
        members = [load_member(path) for path in args.checkpoints]
        ensemble = EnsembleRanker(members, args.weights, standardize).eval()
        if args.files:
            split = read_letor_files(args.files, ensemble.n_features)
        else:
            datamodule = evaluation_data(args.checkpoints[0], args.data)
            if datamodule.n_features != ensemble.n_features:
                raise ValueError(
                    f"the members read {ensemble.n_features} features, the evaluation data has "
                    f"{datamodule.n_features}"
                )
            split = datamodule.split_data("test")
        scales = [score_scale(s, split) for s in member_scores(args.checkpoints, members, split)]
        check_scales(args.checkpoints, scales, standardize)
        scores = score_split(ensemble, split)
        predictions, values = prediction_files(args.out, scores, split, evaluate=True, ks=args.ks)
        files: dict[Path, bytes | str] = dict(predictions)  # the exports add binary files
        record = {
            "checkpoints": [str(Path(path).resolve()) for path in args.checkpoints],
            "weights": list(ensemble.weights),
            "scores": args.scores,
            "member_scales": scales,
        }
        files[args.out / "ensemble.json"] = json.dumps(record, indent=2) + "\n"
        if args.export:  # one graph: raw features (and mask) in, the averaged scores out
            served = export_files(
                Scorer(ensemble), args.out / "export", args.export, ExportOptions()
            )
            files.update(served)
        write_files(files)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(values, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

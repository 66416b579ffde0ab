"""What leaves differank for other systems: a trained scorer as TorchScript or ONNX, and test
scores as a TREC run file.

``Scorer`` is the served function, raw LETOR features ``[B, L, F] -> scores [B, L]``, with the
training split's feature transform (``data.transform``) and z-score folded in, so a caller
passes feature values as they appear in the files. A ranker that attends over the list
(``uses_mask``, e.g. the transformer) is served as ``(features, mask) -> scores`` with ``mask``
bool ``[B, L]`` (True = real document; padded rows may hold anything, NaN included).
``python train.py task=export ckpt_path=RUN/checkpoints/best.ckpt`` writes both formats;
``python train.py task=predict ...`` writes the run file.

Example:
    >>> from differank.rankers.scorers.linear import LinearRanker
    >>> scorer = Scorer(LinearRanker(n_features=3), mean=torch.zeros(3), std=torch.ones(3))
    >>> scorer(torch.zeros(2, 4, 3)).shape
    torch.Size([2, 4])
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

_QUERIES, _DOCUMENTS = torch.export.Dim("queries"), torch.export.Dim("documents")


class Scorer(nn.Module):
    """``ranker((transform(features) - mean) / std)``: the ranker behind the data's feature
    transform and z-score normalisation.

    ``mean``/``std`` [F] are the training statistics (``None``: features are used as given,
    i.e. ``normalization=none``); ``transform`` is the data module's fitted
    ``feature_transform`` (``None``: ``transform=none``). A per-document ranker is called as
    ``scorer(features)`` (padding rows score but mean nothing); a ranker with ``uses_mask`` as
    ``scorer(features, mask)``.
    """

    def __init__(
        self,
        ranker: nn.Module,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
        transform: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.ranker = ranker
        self.uses_mask = bool(getattr(ranker, "uses_mask", False))
        self.transform = nn.Identity() if transform is None else transform
        n_features = ranker.n_features
        mean = torch.zeros(n_features) if mean is None else torch.as_tensor(mean)
        std = torch.ones(n_features) if std is None else torch.as_tensor(std)
        if mean.shape != (n_features,) or std.shape != (n_features,):
            raise ValueError(
                f"mean and std must have shape [{n_features}], got {tuple(mean.shape)} and "
                f"{tuple(std.shape)}"
            )
        self.register_buffer("mean", mean.to(torch.float32))
        self.register_buffer("std", std.to(torch.float32))

    @property
    def n_features(self) -> int:
        return int(self.mean.shape[0])

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        normalised = (self.transform(features) - self.mean) / self.std
        if self.uses_mask:
            return self.ranker(normalised, mask)
        return self.ranker(normalised)


def serving_scorer(ranker: nn.Module, datamodule) -> Scorer:
    """``ranker``'s serving form behind ``datamodule``'s fitted feature transform and z-score
    (``feature_transform``, ``feature_mean``, ``feature_std``): a scorer of raw features."""
    if datamodule.normalization == "query_minmax":
        raise ValueError(
            "export folds in z-score statistics only; train with "
            "data.normalization=zscore or none to export"
        )
    stats = datamodule.feature_mean, datamodule.feature_std  # None, None without z-score
    statistics = (None if s is None else torch.as_tensor(s) for s in stats)
    transform = getattr(datamodule, "feature_transform", None)
    return Scorer(ranker.serving_ranker(), *statistics, transform=transform)


def _example(scorer: Scorer) -> tuple[torch.Tensor, ...]:
    # Two queries of three documents: sizes > 1 so no axis is specialised to a constant; the
    # second query has a padded slot.
    features = torch.randn(2, 3, scorer.n_features, generator=torch.Generator().manual_seed(0))
    if not scorer.uses_mask:
        return (features,)
    return features, torch.tensor([[True, True, True], [True, True, False]])


def export_torchscript(scorer: Scorer, path: str | Path) -> Path:
    """Trace ``scorer`` (in eval mode) to a TorchScript file loadable by ``torch.jit.load``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    scorer = scorer.eval()
    with warnings.catch_warnings(), torch.no_grad():
        # TorchScript is deprecated upstream but still what C++/serving stacks load; asked for.
        warnings.filterwarnings("ignore", message=".*torch.jit.*", category=DeprecationWarning)
        traced = torch.jit.trace(scorer, _example(scorer))
        torch.jit.save(traced, str(path))
    return path


def export_onnx(scorer: Scorer, path: str | Path, opset: int = 18) -> Path:
    """Export ``scorer`` to ONNX (input ``features`` [queries, documents, F], and ``mask`` bool
    [queries, documents] for a ranker with ``uses_mask``; output ``scores`` [queries,
    documents]; both axes dynamic). Needs the ``onnx`` and ``onnxscript`` packages
    (``pip install "differank[export]"``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = ["features", "mask"] if scorer.uses_mask else ["features"]
    with warnings.catch_warnings(), torch.no_grad():
        # features and mask share their two dynamic axes, which the exporter reports
        warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used")
        torch.onnx.export(
            scorer.eval(),
            _example(scorer),
            str(path),
            input_names=names,
            output_names=["scores"],
            dynamic_shapes={name: {0: _QUERIES, 1: _DOCUMENTS} for name in names},
            opset_version=opset,
            dynamo=True,
            verbose=False,
        )
    return path


def write_trec_run(
    path: str | Path,
    qids: Sequence,
    docids: Sequence[str],
    scores: torch.Tensor,
    tag: str = "differank",
) -> Path:
    """Write ``qid Q0 docid rank score tag`` lines (trec_eval's run format), one per row.

    Rows are grouped by query in order of first appearance and ranked by decreasing score, ties
    in file order; scores are printed with ``%.17g``. A row whose doc id is empty or contains
    whitespace gets ``row<N>`` (its row number in the split) so that every line has six fields.
    """
    scores = torch.as_tensor(scores, dtype=torch.float64)
    qids = [str(q) for q in qids]
    if not (len(qids) == len(docids) == scores.numel()):
        raise ValueError(
            f"qids, docids and scores differ in length: {len(qids)}, {len(docids)}, "
            f"{scores.numel()}"
        )
    if bool(torch.isnan(scores).any()):
        raise ValueError("scores contain NaN; a run file cannot rank them")
    first: dict[str, int] = {}
    query = torch.tensor([first.setdefault(q, len(first)) for q in qids], dtype=torch.long)
    order = torch.sort(-scores, stable=True).indices  # by score, ties in file order
    order = order[torch.sort(query[order], stable=True).indices]  # then grouped by query
    values, lines, rank, previous = scores.tolist(), [], 0, None
    for row in order.tolist():
        rank = rank + 1 if qids[row] == previous else 1
        previous = qids[row]
        docid = docids[row] if docids[row] and len(docids[row].split()) == 1 else f"row{row}"
        lines.append(f"{qids[row]} Q0 {docid} {rank} {values[row]:.17g} {tag}\n")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))
    return path

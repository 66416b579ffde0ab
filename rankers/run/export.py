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

import io
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from differank.datamodules.atomic_files import write_file, write_files
from differank.datamodules.letor import NORMALIZATIONS
from differank.datamodules.transforms import GaussRank, SignedLog1p, check_gaussrank_tables
from differank.rankers.training.checkpoints import check_finite

_QUERIES, _DOCUMENTS = torch.export.Dim("queries"), torch.export.Dim("documents")


class Scorer(nn.Module):
    """``ranker((transform(features) - mean) / std)``: the ranker behind the data's feature
    transform and z-score normalisation.

    ``mean``/``std`` [F] are the training statistics (``None``: features are used as given,
    i.e. ``normalization=none``), kept in float64: the z-score is computed in float64 and
    rounded to float32, as the data module computes it, so the ranker sees the very features
    it was trained and tested on. ``transform`` is the data module's fitted
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
        self.register_buffer("mean", mean.to(torch.float64))
        self.register_buffer("std", std.to(torch.float64))

    @property
    def n_features(self) -> int:
        return int(self.mean.shape[0])

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if not torch.jit.is_tracing():  # a trace records operations; the check is for callers
            self.check_features(features)
        transformed = self.transform(features).to(self.mean.dtype)
        normalised = ((transformed - self.mean) / self.std).to(features.dtype)
        if self.uses_mask:
            return self.ranker(normalised, mask)
        return self.ranker(normalised)

    def check_features(self, features) -> None:
        """Say what the scorer expects when ``features`` is not a tensor of the ranker's dtype
        shaped [queries, documents, F] (rather than fail inside the ranker)."""
        expected = next(self.ranker.parameters(), self.mean).dtype
        if not isinstance(features, torch.Tensor):
            raise TypeError(
                f"features must be a torch.Tensor [queries, documents, {self.n_features}] of "
                f"{expected}, got a {type(features).__module__}.{type(features).__name__} "
                "(torch.as_tensor(x, dtype=torch.float32) converts a NumPy array)"
            )
        if features.dtype != expected:
            raise TypeError(
                f"features must be {expected} (the ranker's dtype), got {features.dtype}: pass "
                f"features.to({expected})"
            )
        if features.dim() != 3 or features.shape[-1] != self.n_features:
            raise ValueError(
                f"features must be [queries, documents, {self.n_features}] (the model reads "
                f"{self.n_features} features), got {list(features.shape)}"
            )


def serving_record(datamodule) -> dict[str, Any]:
    """What scoring raw features needs besides the weights, from a data module after its
    setup: the feature count, the normalization with its float64 statistics and the fitted
    feature transform (its name and tables). ``train.py`` saves it with every checkpoint
    (``checkpoint["differank"]["serving"]``, tensors and plain values: ``weights_only``
    reads it)."""
    transform = getattr(datamodule, "feature_transform", None)
    stats = {}
    for name, value in (("mean", datamodule.feature_mean), ("std", datamodule.feature_std)):
        stats[name] = None if value is None else torch.tensor(value, dtype=torch.float64)
    return {
        "n_features": int(datamodule.n_features),
        "normalization": str(datamodule.normalization),
        **stats,
        "transform": None
        if transform is None
        else {"name": transform.name, **{k: v.clone() for k, v in transform.state_dict().items()}},
    }


def check_serving_record(serving: dict[str, Any], path: str | Path) -> None:
    """Refuse a checkpoint's serving record (its feature count already checked) unless its
    normalization is known, its mean and std finite with one value per feature and the std
    positive, and its transform known with finite non-decreasing GaussRank tables; the error
    names the file, the entry and the value."""

    def refuse(entry: str, problem: str) -> ValueError:
        return ValueError(f"{path}: serving[{entry!r}]{problem}; the file was altered: train again")

    n_features = serving["n_features"]
    normalization = serving.get("normalization")
    if normalization not in NORMALIZATIONS:
        raise refuse("normalization", f" is {normalization!r}, not one of {NORMALIZATIONS}")
    if (serving.get("mean") is None) != (serving.get("std") is None):
        raise refuse("mean", " and serving['std'] must both be tensors or both be None")
    for name in ("mean", "std"):
        value = serving.get(name)
        if value is None:
            continue
        if not isinstance(value, torch.Tensor) or list(value.shape) != [n_features]:
            shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise refuse(name, f" is {shape}, not a tensor [{n_features}] (one per feature)")
        check_finite(f"serving[{name!r}]", value, path, "statistics must be finite")
        if name == "std" and bool((value <= 0).any()):
            index = int((value <= 0).nonzero()[0])
            raise refuse(name, f"[{index}] is {float(value[index])!r}, not a positive scale")
    transform = serving.get("transform")
    if transform is None:
        return
    known = (SignedLog1p.name, GaussRank.name)
    if not isinstance(transform, dict) or transform.get("name") not in known:
        raise refuse("transform", f" is {transform!r}, not one of the transforms {known}")
    if transform["name"] == GaussRank.name:
        knots, values = transform.get("knots"), transform.get("values")
        if not (isinstance(knots, torch.Tensor) and isinstance(values, torch.Tensor)):
            raise refuse("transform", " has no knots and values tensors")
        if knots.ndim != 2 or knots.shape[0] != n_features:
            raise refuse("transform", f": knots are {list(knots.shape)}, not [{n_features}, K]")
        try:
            check_gaussrank_tables(knots, values)
        except ValueError as error:
            raise refuse("transform", f": {error}") from None


def serving_scorer(ranker: nn.Module, serving) -> Scorer:
    """``ranker``'s serving form behind the fitted feature transform and z-score of a
    :func:`serving_record` (or of a set-up data module): a scorer of raw features."""
    if not isinstance(serving, dict):
        serving = serving_record(serving)
    if serving["normalization"] == "query_minmax":
        raise ValueError(
            "a scorer of raw features folds in z-score statistics only; train with "
            "data.normalization=zscore or none to export or score files"
        )
    transform = serving["transform"]
    if transform is not None:
        name = transform["name"]
        if name == SignedLog1p.name:
            transform = SignedLog1p()
        elif name == GaussRank.name:
            transform = GaussRank(transform["knots"], transform["values"])
        else:
            raise ValueError(f"unknown feature transform {name!r} in the serving record")
    return Scorer(ranker.serving_ranker(), serving["mean"], serving["std"], transform=transform)


def _example(scorer: Scorer) -> tuple[torch.Tensor, ...]:
    # Two queries of three documents: sizes > 1 so no axis is specialised to a constant; the
    # second query has a padded slot.
    features = torch.randn(2, 3, scorer.n_features, generator=torch.Generator().manual_seed(0))
    if not scorer.uses_mask:
        return (features,)
    return features, torch.tensor([[True, True, True], [True, True, False]])


def export_torchscript(scorer: Scorer, path: str | Path) -> Path:
    """Trace ``scorer`` (in eval mode) to a TorchScript file loadable by ``torch.jit.load``
    (written whole or not at all)."""
    return write_file(path, torchscript_bytes(scorer))


def torchscript_bytes(scorer: Scorer) -> bytes:
    """The TorchScript archive :func:`export_torchscript` writes, in memory."""
    scorer = scorer.eval()
    archive = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        # TorchScript is deprecated upstream but still what C++/serving stacks load; asked for.
        warnings.filterwarnings("ignore", message=".*torch.jit.*", category=DeprecationWarning)
        traced = torch.jit.trace(scorer, _example(scorer))
        torch.jit.save(traced, archive)
    return archive.getvalue()


def export_onnx(scorer: Scorer, path: str | Path, opset: int = 18) -> Path:
    """Export ``scorer`` to ONNX (input ``features`` [queries, documents, F], and ``mask`` bool
    [queries, documents] for a ranker with ``uses_mask``; output ``scores`` [queries,
    documents]; both axes dynamic), written whole or not at all. Needs the ``onnx`` and
    ``onnxscript`` packages (``pip install "differank[export]"``)."""
    write_files(onnx_files(scorer, path, opset))
    return Path(path)


def onnx_files(scorer: Scorer, path: str | Path, opset: int = 18) -> dict[Path, bytes]:
    """The files :func:`export_onnx` writes, in memory: ``{path: graph}``, plus
    ``{path + ".data": weights}`` when the exporter stores the weights beside the graph (the
    graph names that file by its base name, so the two stay together). For writers that add
    files of their own (a Triton repository) and write them all at once."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = ["features", "mask"] if scorer.uses_mask else ["features"]
    served = _NonEmptyLists(scorer) if scorer.uses_mask else scorer
    # The exporter writes its files itself: into a scratch folder beside ``path``, read back
    # and removed, so the caller writes them whole or not at all.
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as scratch:
        exported = Path(scratch) / path.name
        with warnings.catch_warnings(), torch.no_grad():
            # features and mask share their two dynamic axes, which the exporter reports
            warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used")
            torch.onnx.export(
                served.eval(),
                _example(scorer),
                str(exported),
                input_names=names,
                output_names=["scores"],
                dynamic_shapes={name: {0: _QUERIES, 1: _DOCUMENTS} for name in names},
                opset_version=opset,
                dynamo=True,
                verbose=False,
            )
        files = {path: exported.read_bytes()}
        weights = exported.with_name(exported.name + ".data")  # the external-data file
        if weights.is_file() and weights.stat().st_size > 0:  # empty: every weight inline
            files[path.with_name(weights.name)] = weights.read_bytes()
    return files


class _NonEmptyLists(nn.Module):
    """A list-attending scorer with one masked-out slot appended (and its score dropped): ONNX
    ``Reshape`` reads a 0 in a target shape as "keep this dimension", so the attention's
    reshapes fail on lists of length 0 unless the graph never sees one."""

    def __init__(self, scorer: Scorer) -> None:
        super().__init__()
        self.scorer = scorer

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        slot = features.new_zeros(features.shape[0], 1, features.shape[2])
        padded = torch.cat([features, slot], dim=1)
        scores = self.scorer(padded, torch.cat([mask, mask.new_zeros(mask.shape[0], 1)], dim=1))
        return scores[:, : features.shape[1]]


def write_trec_run(
    path: str | Path,
    qids: Sequence,
    docids: Sequence[str],
    scores: torch.Tensor,
    tag: str = "differank",
) -> Path:
    """Write :func:`trec_run_text` to ``path`` (whole or not at all)."""
    return write_file(path, trec_run_text(qids, docids, scores, tag))


def trec_run_text(
    qids: Sequence, docids: Sequence[str], scores: torch.Tensor, tag: str = "differank"
) -> str:
    """``qid Q0 docid rank score tag`` lines (trec_eval's run format), one per row.

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
        lines.append(
            f"{qids[row]} Q0 {trec_docid(docids[row], row)} {rank} {values[row]:.17g} {tag}\n"
        )
    return "".join(lines)


def write_trec_qrels(path: str | Path, qids: Sequence, docids: Sequence[str], labels) -> Path:
    """Write :func:`trec_qrels_text` to ``path`` (whole or not at all)."""
    return write_file(path, trec_qrels_text(qids, docids, labels))


def trec_qrels_text(qids: Sequence, docids: Sequence[str], labels) -> str:
    """``qid 0 docid label`` lines (trec_eval's qrels format), one per row in file order, doc
    ids spelled as in :func:`trec_run_text` so the two files pair up."""
    labels = [int(label) for label in torch.as_tensor(labels).tolist()]
    if not (len(qids) == len(docids) == len(labels)):
        raise ValueError(
            f"qids, docids and labels differ in length: {len(qids)}, {len(docids)}, {len(labels)}"
        )
    return "".join(
        f"{qid} 0 {trec_docid(docid, row)} {label}\n"
        for row, (qid, docid, label) in enumerate(zip(qids, docids, labels, strict=True))
    )


def trec_docid(docid: str, row: int) -> str:
    """A row's doc id as one TREC field: ``row<N>`` when it is empty or holds whitespace."""
    return docid if docid and len(docid.split()) == 1 else f"row{row}"

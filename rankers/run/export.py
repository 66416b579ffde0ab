"""What leaves differank for other systems: a trained scorer
(:class:`differank.rankers.checkpoints.Scorer`, raw LETOR features in) as TorchScript or ONNX,
and test scores as a TREC run file.

``python train.py task=export ckpt_path=RUN/checkpoints/best.ckpt`` writes both formats;
``python train.py task=predict ...`` writes the run file. ``Scorer``, ``serving_record``,
``serving_scorer`` and ``check_serving_record`` moved to :mod:`differank.rankers.checkpoints`
(importable from here, with a DeprecationWarning, for one release).
"""

from __future__ import annotations

import io
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from differank.datamodules.atomic_files import write_file, write_files
from differank.rankers.checkpoints.old_paths import forward_moved

if TYPE_CHECKING:
    from differank.rankers.checkpoints.serving import Scorer

_DYNAMIC_AXES = {0: "queries", 1: "documents"}  # of features, mask and scores


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
    documents]; both axes dynamic), written whole or not at all, by torch's TorchScript-based
    exporter (docs/serving.md#which-onnx-exporter). Needs the ``onnx`` package (``pip install
    "differank[export]"``)."""
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
            # torch's TorchScript-based exporter: deprecated upstream since 2.9 in favour of the
            # torch.export one (dynamo=True), which exports the default MLP several times more
            # slowly and loads the compiler (docs/serving.md#which-onnx-exporter); the parity
            # tests (tests/rankers/run/test_dynamic_shapes.py) hold it to the eager scorer.
            for message in ("You are using the legacy TorchScript-based", "The feature will be"):
                warnings.filterwarnings("ignore", message=message, category=DeprecationWarning)
            torch.onnx.export(
                served.eval(),
                _example(scorer),
                str(exported),
                input_names=names,
                output_names=["scores"],
                dynamic_axes={name: _DYNAMIC_AXES for name in [*names, "scores"]},
                opset_version=opset,
                dynamo=False,
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


__getattr__ = forward_moved(__name__)  # the served scorer's names, moved to the checkpoint room

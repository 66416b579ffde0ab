"""What ``task=export`` writes, by ``export.format``: a registry of writers, each giving the files
of one format in memory, so that every format asked for is written whole or none is.

=============== ============================================= ===================================
format          files under ``RUN/export/``                   read by
=============== ============================================= ===================================
``torchscript`` ``scorer.pt``                                 ``torch.jit.load``, LibTorch,
                                                              Triton's PyTorch backend
``onnx``        ``scorer.onnx`` (+ ``scorer.onnx.data``)      ONNX Runtime, Vespa
``solr``        ``solr/model.json``, ``solr/features.json``   Solr's LTR module (linear, MLP)
``triton``      ``triton/NAME/config.pbtxt``,                 Triton Inference Server
                ``triton/NAME/1/model.onnx``
``ranklib``     ``ranklib/model.txt``                         RankLib (linear, sigmoid MLP)
``opensearch``  ``opensearch/featureset.json``,               OpenSearch's and Elasticsearch's
                ``opensearch/model.json``                     LTR plugins (linear, sigmoid MLP)
=============== ============================================= ===================================

``export.format=null`` (the default) writes ``torchscript`` and ``onnx``, and without the
``export`` extra installed only ``torchscript`` (with a warning), as before this option existed;
a format named explicitly fails instead. ``docs/serving.md`` takes each to its engine.

Public API::

    EXPORT_FORMATS = {"torchscript": ..., "onnx": ..., "solr": ..., "triton": ..., ...}
    export_files(scorer, folder, formats, options) -> {path: bytes or str}
    ExportOptions(name="differank", feature_names=None)

Example:
    >>> sorted(EXPORT_FORMATS)
    ['onnx', 'opensearch', 'ranklib', 'solr', 'torchscript', 'triton']
    >>> from differank.rankers.checkpoints import Scorer
    >>> from differank.rankers.scorers.linear import LinearRanker
    >>> files = export_files(Scorer(LinearRanker(2)), Path("out"), ["solr"], ExportOptions())
    >>> sorted(str(path) for path in files)
    ['out/solr/features.json', 'out/solr/model.json']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from differank.rankers.checkpoints import Scorer
from differank.rankers.run.export import onnx_files, torchscript_bytes
from differank.rankers.run.opensearch import opensearch_files
from differank.rankers.run.ranklib import ranklib_files
from differank.rankers.run.solr import solr_files
from differank.rankers.run.triton import triton_files


@dataclass(frozen=True)
class ExportOptions:
    """``conf/train.yaml``'s ``export`` options besides the format: ``name`` (Solr's model and
    feature store, Triton's model folder, OpenSearch's feature set and model) and
    ``feature_names`` (Solr's and OpenSearch's, one per feature in LETOR order; None:
    ``feature_1 .. feature_F``)."""

    name: str = "differank"
    feature_names: Sequence[str] | None = None


Writer = Callable[[Scorer, Path, ExportOptions], Mapping[Path, "bytes | str"]]

EXPORT_FORMATS: dict[str, Writer] = {
    "torchscript": lambda scorer, folder, _: {folder / "scorer.pt": torchscript_bytes(scorer)},
    "onnx": lambda scorer, folder, _: onnx_files(scorer, folder / "scorer.onnx"),
    "solr": lambda scorer, folder, options: solr_files(
        scorer, folder / "solr", options.name, options.feature_names
    ),
    "triton": lambda scorer, folder, options: triton_files(scorer, folder / "triton", options.name),
    "ranklib": lambda scorer, folder, _: ranklib_files(scorer, folder / "ranklib"),
    "opensearch": lambda scorer, folder, options: opensearch_files(
        scorer, folder / "opensearch", options.name, options.feature_names
    ),
}
DEFAULT_FORMATS = ("torchscript", "onnx")


def check_formats(formats: str | Sequence[str] | None) -> list[str]:
    """``export.format`` as a list of known formats (None: ``DEFAULT_FORMATS``)."""
    if formats is None:
        return list(DEFAULT_FORMATS)
    chosen = [formats] if isinstance(formats, str) else [str(f) for f in formats]
    unknown = [name for name in chosen if name not in EXPORT_FORMATS]
    if unknown or not chosen:
        raise ValueError(
            f"export.format must be one of {sorted(EXPORT_FORMATS)} or a list of them "
            f"(export.format=[onnx,solr]), got {formats!r}"
        )
    return list(dict.fromkeys(chosen))


def export_files(
    scorer: Scorer, folder: Path, formats: Sequence[str], options: ExportOptions
) -> dict[Path, bytes | str]:
    """Every file of ``formats`` (names of :data:`EXPORT_FORMATS`) under ``folder``, in memory."""
    files: dict[Path, bytes | str] = {}
    for name in check_formats(list(formats)):
        files.update(EXPORT_FORMATS[name](scorer.eval(), Path(folder), options))
    return files

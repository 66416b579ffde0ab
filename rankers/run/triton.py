"""A scorer as an NVIDIA Triton Inference Server model repository: the ONNX export and its
``config.pbtxt`` (ONNX Runtime backend), laid out as Triton reads it::

    FOLDER/NAME/config.pbtxt
    FOLDER/NAME/1/model.onnx        (+ model.onnx.data when the exporter stores weights apart)

Inputs and outputs are those of :func:`~differank.rankers.run.export.export_onnx`: ``features``
FP32 ``[queries, documents, F]`` (and ``mask`` BOOL ``[queries, documents]`` for a scorer
that attends over the list), ``scores`` FP32 ``[queries, documents]``, every axis but F
dynamic (-1).

``max_batch_size: 0``: the queries axis is the model's own, not one Triton adds. Triton's
dynamic batcher stacks only requests of the same shape, and two queries rarely have the same
number of documents, so a client batches itself: it pads its queries to one length (and
sends the mask) in one request. ``docs/serving.md#triton`` shows a request.

Public API::

    triton_files(scorer, folder, name="differank") -> {path: bytes}
    triton_config(name, n_features, uses_mask) -> str

Example:
    >>> print(triton_config("ranker", 46, uses_mask=False))
    name: "ranker"
    platform: "onnxruntime_onnx"
    max_batch_size: 0
    input [
      {
        name: "features"
        data_type: TYPE_FP32
        dims: [ -1, -1, 46 ]
      }
    ]
    output [
      {
        name: "scores"
        data_type: TYPE_FP32
        dims: [ -1, -1 ]
      }
    ]
    <BLANKLINE>
"""

from __future__ import annotations

import re
from pathlib import Path

from differank.datamodules.path_components import path_component
from differank.rankers.run.export import onnx_files

MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # Triton's model names (and one folder: see below)


def _tensor(name: str, data_type: str, dims: list[int]) -> str:
    shown = ", ".join(str(d) for d in dims)
    return f'  {{\n    name: "{name}"\n    data_type: {data_type}\n    dims: [ {shown} ]\n  }}'


def triton_config(name: str, n_features: int, uses_mask: bool) -> str:
    """The ``config.pbtxt`` of a differank ONNX scorer named ``name``: a folder name of the
    repository, so also one path component (``..`` would leave the repository)."""
    if not MODEL_NAME.fullmatch(path_component(name, "export.name")):
        raise ValueError(
            f"a Triton model name is a folder name of letters, digits, '_', '-' and '.', "
            f"got {name!r} (export.name=...)"
        )
    inputs = [_tensor("features", "TYPE_FP32", [-1, -1, n_features])]
    if uses_mask:
        inputs.append(_tensor("mask", "TYPE_BOOL", [-1, -1]))
    listed = ",\n".join(inputs)
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        f"input [\n{listed}\n]\n"
        f"output [\n{_tensor('scores', 'TYPE_FP32', [-1, -1])}\n]\n"
    )


def triton_files(scorer, folder: str | Path, name: str = "differank") -> dict[Path, bytes]:
    """The repository's files for :func:`~differank.datamodules.atomic_files.write_files`:
    ``folder/name/config.pbtxt`` and version 1's ONNX graph (and weights)."""
    config = triton_config(name, scorer.n_features, scorer.uses_mask)
    model = Path(folder) / name
    files = onnx_files(scorer, model / "1" / "model.onnx")
    return {model / "config.pbtxt": config.encode(), **files}

"""A linear or sigmoid-MLP scorer in RankLib's text model format, as RankLib's
``RankerFactory.loadRankerFromString`` reads it, and with it OpenSearch's (and the
Elasticsearch plugin's) ``model/ranklib``.

RankLib knows a model by its first line (``## NAME``, the ranker's ``name()``); its loaders
skip every other line that starts with ``##``. Features are RankLib's 1-based ids: id ``i``
is differank's feature ``i`` (LETOR's id; in OpenSearch, the ``i``-th feature of the feature
set). The serving record's z-score is folded into the weights
(:mod:`~differank.rankers.run.engine_layers`); a non-affine ``data.transform`` is refused.

**Linear scorers: RankLib's ``Linear Regression`` model** (``LinearRegRank``), one line of
``id:weight`` pairs whose id 0 is the constant::

    ## Linear Regression
    0:b 1:w_1 2:w_2 ... F:w_F

    score = b + Σ_i w_i x_i          (exactly differank's score: intercept included)

**MLPs with sigmoid hidden layers: RankLib's ``RankNet``** (read by ``RankNet.loadFromString``)::

    ## RankNet
    1 2 ... F                        the input neurons' feature ids, in order
    H                                the number of hidden layers
    n_1 ... n_H                      one line each: the neurons of each hidden layer
    0 i w ...                        input neuron i (0..F-1): its weights to layer 1's neurons
    0 F w ...                        the bias neuron (input F, output 1.0): its weights to every
                                     neuron of layers 1..H and the output, in that order
    l j w ...                        hidden neuron j of layer l (1..H): its weights to layer
                                     l+1's neurons (the output neuron after layer H)

The weights to a neuron are one column of differank's ``Linear`` (``weight[k, j]`` is neuron
``j``'s weight to neuron ``k`` of the next layer) and each neuron's bias is the bias neuron's
weight to it. Every RankLib neuron, the output one included, computes
``sigmoid(Σ in·w)`` (its ``LogiFunction``), so RankLib's score is ``sigmoid(s)`` of
differank's score ``s``: the same order (sigmoid is increasing), not the same number; in
float32 (OpenSearch casts RankLib's double to float) scores above about 17 all round to 1.0
and tie. An MLP whose hidden layers are relu or tanh has no RankNet form: it is refused,
naming ``model.ranker.activation=sigmoid``; an MLP without hidden layers is linear.

A feature RankLib or OpenSearch cannot compute counts 0 (RankLib's unknown value and
OpenSearch's unmatched feature query both read 0), which is LETOR's rule for an absent feature.

Public API::

    ranklib_model(scorer) -> str               # the model text
    ranklib_text(layers) -> str                # the same of engine_layers.folded_layers
    ranklib_files(scorer, folder) -> {folder/model.txt: text}

Example:
    >>> import torch
    >>> from differank.rankers.checkpoints import Scorer
    >>> from differank.rankers.scorers.linear import LinearRanker
    >>> scorer = Scorer(LinearRanker(2))
    >>> with torch.no_grad():
    ...     _ = scorer.ranker.linear.weight.copy_(torch.tensor([[0.5, -2.0]]))
    >>> print(ranklib_model(scorer), end="")
    ## Linear Regression
    ## differank linear scorer, z-score folded in: score = w_0 + sum_i w_i x_i (ids 1..F)
    0:0.0 1:0.5 2:-2.0
"""

from __future__ import annotations

from pathlib import Path

from differank.rankers.run.engine_layers import EngineLayer, folded_layers

LINEAR_REGRESSION = "Linear Regression"  # RankLib's LinearRegRank.name()
RANKNET = "RankNet"  # RankLib's RankNet.name()
ENGINE = "RankLib's model format"


def ranklib_model(scorer) -> str:
    """RankLib's text of a linear or sigmoid-MLP :class:`~differank.rankers.checkpoints.Scorer`
    (:func:`ranklib_text` of its folded layers)."""
    return ranklib_text(folded_layers(scorer, ENGINE))


def ranklib_text(layers: list[EngineLayer]) -> str:
    """RankLib's text of :func:`~differank.rankers.run.engine_layers.folded_layers`:
    ``## Linear Regression`` for one affine layer, ``## RankNet`` for sigmoid hidden layers."""
    if len(layers) == 1:
        return _linear_regression(layers[0])
    return _ranknet(layers)


def ranklib_files(scorer, folder: str | Path) -> dict[Path, str]:
    """``{folder/model.txt: ranklib_model(scorer)}`` for
    :func:`~differank.datamodules.atomic_files.write_files`."""
    return {Path(folder) / "model.txt": ranklib_model(scorer)}


def _number(value: float) -> str:
    """A weight as Java's ``Double.parseDouble`` reads it back exactly (Python's shortest
    round-trip form: ``0.5``, ``-1.25e-05``)."""
    return repr(float(value))


def _linear_regression(layer: EngineLayer) -> str:
    pairs = [f"0:{_number(float(layer.bias[0]))}"]
    pairs += [f"{fid}:{_number(w)}" for fid, w in enumerate(layer.matrix[0].tolist(), start=1)]
    return (
        f"## {LINEAR_REGRESSION}\n"
        "## differank linear scorer, z-score folded in: score = w_0 + sum_i w_i x_i (ids 1..F)\n"
        + " ".join(pairs)
        + "\n"
    )


def _ranknet(layers: list[EngineLayer]) -> str:
    hidden = layers[:-1]  # the output layer's activation is RankLib's own sigmoid
    other = sorted({layer.activation for layer in hidden} - {"sigmoid"})
    if other:
        raise ValueError(
            f"RankLib's RankNet computes every neuron as a sigmoid; this MLP's hidden layers "
            f"use {', '.join(other)}: train it with model.ranker.activation=sigmoid to export it "
            "to RankLib or OpenSearch's model/ranklib (export.format=solr or onnx keep "
            f"{', '.join(other)})"
        )
    n_features = hidden[0].matrix.shape[1]
    widths = [layer.matrix.shape[0] for layer in hidden]
    lines = [
        f"## {RANKNET}",
        "## differank MLP with sigmoid hidden layers, z-score folded in; RankNet's output "
        "neuron is a sigmoid too: score = sigmoid(differank score)",
        f"## No. of features = {n_features}",
        f"## No. of hidden layers = {len(hidden)}",
        *(f"## Layer {number}: {width} neurons" for number, width in enumerate(widths, start=1)),
        " ".join(str(fid) for fid in range(1, n_features + 1)),
        str(len(hidden)),
        *(str(width) for width in widths),
    ]
    # neuron j of layer l sends a weight to each neuron of layer l+1: column j of the matrix
    # of layers[l], the differank layer that maps layer l to layer l+1
    for number, layer in enumerate(layers):
        for j, weights in enumerate(layer.matrix.T.tolist()):
            lines.append(f"{number} {j} " + " ".join(_number(w) for w in weights))
        if number == 0:  # the bias neuron, input F, after the input neurons
            biases = [b for layer in layers for b in layer.bias.tolist()]
            lines.append(f"0 {n_features} " + " ".join(_number(b) for b in biases))
    return "\n".join(lines) + "\n"

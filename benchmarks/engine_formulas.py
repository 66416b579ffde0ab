"""What a search engine computes from differank's engine files, as vectorised numpy: the
scorers ``benchmarks/serving_cost.py`` times for the Solr and RankLib formats. Each is parsed
once from the written file (as the engine parses a model once at upload) and then scores a
list of documents, rows of raw feature values [N, F] (feature ``i``: LETOR id ``i + 1``, Solr's
``feature_{i + 1}``).

Written from the engines' formulas, not from differank's writers:

- **Solr** ``LinearModel``: ``score = Σ_f weight_f · value_f`` over the model's features (the
  constant ``differank_bias`` feature is 1), in float as Solr computes. ``NeuralNetworkModel``:
  each layer ``activation(matrix · input + bias)``, ``matrix`` [out][in], in float.
- **RankLib** ``Linear Regression``: ``constant + Σ w_id · x_id`` (id 0 is the constant), in
  double. ``RankNet``: neurons wired layer to layer, input neuron ``i`` sending one weight to
  each neuron of hidden layer 1, hidden neuron ``j`` of layer ``l`` one to each neuron of layer
  ``l + 1``, and the bias neuron (the input layer's last, output 1) one to every neuron of every
  later layer in order; every neuron (the output one included) is ``sigmoid(Σ in · w)``, in
  double. The per-neuron sums of RankLib's Java are written here as one matrix product a layer.

Public API::

    solr_scorer(model: dict) -> score(values [N, F]) -> [N]
    ranklib_scorer(text: str) -> score(values [N, F]) -> [N]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
}
SOLR_BIAS = "differank_bias"  # a constant-1 ValueFeature of the feature store


def solr_scorer(model: dict) -> Callable[[np.ndarray], np.ndarray]:
    """Solr's score of rows of raw feature values under a model-store JSON (a dict)."""
    names = [feature["name"] for feature in model["features"]]
    if model["class"].endswith(".LinearModel"):
        weights = model["params"]["weights"]
        columns = [name for name in names if name != SOLR_BIAS]
        w = np.array([weights[name] for name in columns], np.float32)
        constant = np.float32(weights.get(SOLR_BIAS, 0.0))

        def linear(values: np.ndarray) -> np.ndarray:
            return values.astype(np.float32, copy=False) @ w + constant

        return linear
    layers = [
        (
            np.array(layer["matrix"], np.float32).T,  # [in, out]: rows of values times it
            np.array(layer["bias"], np.float32),
            ACTIVATIONS[layer["activation"]],
        )
        for layer in model["params"]["layers"]
    ]

    def network(values: np.ndarray) -> np.ndarray:
        hidden = values.astype(np.float32, copy=False)
        for matrix, bias, activation in layers:
            hidden = activation(hidden @ matrix + bias)
        return hidden[:, 0]

    return network


def ranklib_scorer(text: str) -> Callable[[np.ndarray], np.ndarray]:
    """RankLib's double score of rows of raw feature values under a model text."""
    name = text.split("\n", 1)[0].removeprefix("## ").strip()
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line and not line.startswith("##")]
    if name == "Linear Regression":
        pairs = [pair.split(":") for pair in lines[0].split()]
        weights = {int(fid): float(w) for fid, w in pairs}
        constant = weights.pop(0, 0.0)
        ids = np.array(sorted(weights)) - 1
        w = np.array([weights[fid + 1] for fid in ids])

        def linear(values: np.ndarray) -> np.ndarray:
            return constant + values[:, ids].astype(np.float64) @ w

        return linear
    if name != "RankNet":
        raise ValueError(f"no numpy formula for RankLib's {name!r} model")
    ids = np.array([int(fid) for fid in lines[0].split()]) - 1
    n_hidden = int(lines[1])
    widths = [len(ids), *(int(lines[2 + i]) for i in range(n_hidden)), 1]
    matrices = [np.zeros((widths[k], widths[k + 1])) for k in range(len(widths) - 1)]
    biases = [np.zeros(widths[k + 1]) for k in range(len(widths) - 1)]
    for line in lines[2 + n_hidden :]:
        layer, neuron, *weights = line.split()
        layer, neuron = int(layer), int(neuron)
        if layer == 0 and neuron == len(ids):  # the bias neuron: every later neuron, in order
            flat = np.array(weights[: sum(widths[1:])], np.float64)
            for k, bias in enumerate(biases):
                bias[:] = flat[sum(widths[1 : k + 1]) : sum(widths[1 : k + 2])]
        else:
            matrices[layer][neuron] = np.array(weights[: widths[layer + 1]], np.float64)

    def ranknet(values: np.ndarray) -> np.ndarray:
        hidden = values[:, ids].astype(np.float64)
        for matrix, bias in zip(matrices, biases, strict=True):
            hidden = 1 / (1 + np.exp(-(hidden @ matrix + bias)))
        return hidden[:, 0]

    return ranknet

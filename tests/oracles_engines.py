"""NumPy oracles of how RankLib and the OpenSearch LTR plugin read and score a model, written
from their Java sources (RankLib's ``RankerFactory``, ``LinearRegRank``, ``RankNet``,
``Neuron``, ``LogiFunction``, ``KeyValuePair``, ``DenseDataPoint``; the plugin's
``RanklibModelParser``, ``DenseProgramaticDataPoint``, ``LinearRankerParser``,
``LinearRanker``), sharing no code with differank's writers.

``ranklib_scores(text, values)``: load a RankLib model text and score rows of feature values
(``values`` [N, F]: feature id ``i + 1`` in column ``i``; NaN is RankLib's unknown value, read as
0), in double as RankLib does. ``opensearch_linear_scores(definition, names, values)``: the
plugin's ``model/linear`` (float32 weights, a float32 sum in feature-set order).
``opensearch_feature_scores(feature_set, fields, rows)``: the feature set's query templates
scored on documents' fields (a missing field: the template's ``missing``).
"""

from __future__ import annotations

import json

import numpy as np


def _model_lines(text: str) -> tuple[str, list[str]]:
    """RankerFactory.loadRankerFromString: the first line minus ``## `` names the ranker; the
    ranker's loader then keeps the trimmed lines that are neither empty nor ``##``."""
    lines = text.split("\n")
    name = lines[0].replace("## ", "").strip()
    kept = [line.strip() for line in lines]
    return name, [line for line in kept if line and not line.startswith("##")]


def _feature_value(values: np.ndarray, fid: int) -> np.ndarray:
    """DataPoint.getFeatureValue: ids start at 1; an unknown (NaN) value reads 0."""
    assert 0 < fid <= values.shape[1], f"requesting unspecified feature, fid={fid}"
    column = values[:, fid - 1].astype(np.float32).astype(np.float64)  # fVals are floats
    return np.where(np.isnan(column), 0.0, column)


def _linear_regression(lines: list[str], values: np.ndarray) -> np.ndarray:
    """LinearRegRank: the first data line's ``key:value`` pairs (KeyValuePair: split on " ",
    the key before the first ":", the value after the last); a key <= 0 is the constant."""
    assert "#" not in lines[0], "KeyValuePair drops everything after a '#'"
    pairs = [pair for pair in lines[0].split(" ") if pair.strip()]
    constant = 0.0
    terms = []
    for pair in pairs:
        fid, weight = int(pair[: pair.index(":")]), float(pair[pair.rindex(":") + 1 :])
        if fid > 0:
            terms.append((fid, weight))
        else:
            constant = weight
    score = np.full(values.shape[0], constant)  # eval: the constant, then each feature in order
    for fid, weight in terms:
        score = score + weight * _feature_value(values, fid)
    return score


def _ranknet(lines: list[str], values: np.ndarray) -> np.ndarray:
    """RankNet.loadFromString, wire() and eval(): neurons linked in wire's order, every
    non-input neuron ``LogiFunction(Σ source output · weight)``."""
    features = [int(fid) for fid in lines[0].split(" ")]
    n_hidden = int(lines[1])
    widths = [len(features) + 1, *(int(lines[2 + i]) for i in range(n_hidden)), 1]
    bias = (0, len(features))  # the input layer's last neuron, output fixed at 1.0
    # wire(): each neuron's out-links (target layer, target neuron), in creation order
    out_links: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i in range(len(features)):
        out_links[(0, i)] = [(1, j) for j in range(widths[1])]
    for layer in range(1, len(widths) - 1):
        for j in range(widths[layer]):
            out_links[(layer, j)] = [(layer + 1, k) for k in range(widths[layer + 1])]
    out_links[bias] = [(layer, j) for layer in range(1, len(widths)) for j in range(widths[layer])]
    # the weight lines: "layer neuron w_0 w_1 ...", one weight per out-link in order
    weights: dict[tuple[int, int], list[float]] = {}
    for line in lines[2 + n_hidden :]:
        fields = line.split(" ")
        source = (int(fields[0]), int(fields[1]))
        assert len(fields) - 2 >= len(out_links[source]), f"{source}: {len(fields) - 2} weights"
        weights[source] = [float(w) for w in fields[2 : 2 + len(out_links[source])]]
    # each neuron's in-links, in the order wire() created them (the order of its sum)
    in_links: dict[tuple[int, int], list[tuple[tuple[int, int], float]]] = {}
    for source, targets in out_links.items():
        for target, w in zip(targets, weights[source], strict=True):
            in_links.setdefault(target, []).append((source, w))
    # eval(): inputs, the bias neuron's 1.0, then layer by layer
    outputs = {(0, i): _feature_value(values, fid) for i, fid in enumerate(features)}
    outputs[bias] = np.ones(values.shape[0])
    for layer in range(1, len(widths)):
        for j in range(widths[layer]):
            wsum = np.zeros(values.shape[0])
            for source, w in in_links[(layer, j)]:
                wsum = wsum + outputs[source] * w
            outputs[(layer, j)] = 1.0 / (1.0 + np.exp(-wsum))
    return outputs[(len(widths) - 1, 0)]


RANKERS = {"Linear Regression": _linear_regression, "RankNet": _ranknet}


def ranklib_scores(text: str, values: np.ndarray) -> np.ndarray:
    """RankLib's double scores of ``values`` [N, F] under the model ``text``."""
    name, lines = _model_lines(text)
    return RANKERS[name](lines, values)


def opensearch_ranklib_scores(text: str, values: np.ndarray) -> np.ndarray:
    """The plugin's ``model/ranklib``: RankLib's score of the feature-set vector (feature
    ordinal ``i`` is RankLib id ``i + 1``, unmatched features 0), cast to float."""
    return ranklib_scores(text, values).astype(np.float32)


def opensearch_linear_scores(definition: str, names: list[str], values: np.ndarray) -> np.ndarray:
    """LinearRankerParser + LinearRanker: a float weight per feature-set ordinal (unnamed
    features 0), ``score += weights[i] * scores[i]`` in float over the ordinals; ``values``
    [N, len(names)] are the feature queries' float scores (NaN: unmatched, 0)."""
    weights = np.zeros(len(names), dtype=np.float32)
    for name, w in json.loads(definition).items():
        assert name in names, f"Feature [{name}] is unknown."
        weights[names.index(name)] = np.float32(w)
    features = np.where(np.isnan(values), 0, values).astype(np.float32)
    score = np.zeros(values.shape[0], dtype=np.float32)
    for i in range(len(names)):
        score = (score + weights[i] * features[:, i]).astype(np.float32)
    return score


def opensearch_feature_scores(
    feature_set: dict, fields: dict[str, np.ndarray], rows: int
) -> np.ndarray:
    """[N, features] float32: each feature's query score, in the set's order: a
    ``field_value_factor`` over ``match_all`` (boost_mode replace) is the field's value, its
    ``missing`` where the document has none (NaN here); ``constant_score`` is its boost."""
    columns = []
    for feature in feature_set["featureset"]["features"]:
        assert feature["template_language"] == "mustache" and feature["params"] == ["keywords"]
        template = feature["template"]
        if "function_score" in template:
            function = template["function_score"]
            assert function["query"] == {"match_all": {}} and function["boost_mode"] == "replace"
            factor = function["field_value_factor"]
            values = fields[factor["field"]]
            columns.append(np.where(np.isnan(values), factor["missing"], values))
        else:
            constant = template["constant_score"]
            assert constant["filter"] == {"match_all": {}}
            columns.append(np.full(rows, constant["boost"]))
    return np.stack(columns, axis=1).astype(np.float32)

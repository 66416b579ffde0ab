"""A tree student as XGBoost's JSON dump, the ``model/xgboost+json`` definition that the
OpenSearch (and Elasticsearch) learning-to-rank plugin reads: a JSON array of trees, each node
``{"nodeid", "depth", "split", "split_condition", "yes", "no", "missing", "children"}`` and each
leaf ``{"nodeid", "leaf"}``, ``split`` a feature's name in the plugin's feature set.

How the plugin scores it (its ``XGBoostJsonParser`` and ``NaiveAdditiveDecisionTree``): the
sum, in float32, of one leaf per tree; at a node, a feature value ``x < split_condition`` goes
to ``yes`` (the first child), a larger or equal one to ``no``, and NaN to ``missing``;
``split_condition`` and ``leaf`` are read as float32. A feature the request does not compute is
NaN, so it follows ``missing`` (the plugin's ``missing_as_zero: true``, in the object form of
the definition, scores it as 0 instead: LETOR's rule for an absent feature).

An XGBoost student's own dump is that layout already (``split`` renamed from ``f<i>`` to the
feature's name). A LightGBM student's trees are converted
(docs/objectives/distill.md#exporting-a-tree-student):

* LightGBM sends ``x <= t`` left, with a float64 threshold ``t``. For a float32 ``x``,
  ``x <= t`` exactly when ``x < t'``, ``t'`` the next float32 above the largest float32 not
  above ``t``; ``t'`` is the ``split_condition``. Caveat: LightGBM compares float64 inputs,
  the dump float32 ones, so a feature value that float32 cannot hold exactly may fall on the
  other side of a threshold between it and its float32 rounding.
* ``missing_type`` ``NaN``: NaN goes to the ``default_left`` side (``missing`` = ``yes`` or
  ``no``); ``None``: LightGBM scores NaN as 0, so ``missing`` is the side 0 goes to; ``Zero``
  (``zero_as_missing``) sends 0 to the default side, which a dump cannot say: refused.
* Leaves are the leaf values (the learning rate is already in them); a tree of one leaf is one
  leaf node. Categorical splits, linear trees and random forests (averaged trees) are refused.

Public API::

    xgboost_trees(model, feature_names=None) -> list of trees (dicts)
    xgboost_json_dump(model_file, feature_names=None) -> str   # model/xgboost+json
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from differank.rankers.run.engine_layers import check_feature_names
from differank.rankers.students.model_files import StudentModel, read_student_model

Node = dict  # one node of a library's dump
Rewrite = Callable[[Node, Node, Node, list[str]], dict]  # (node, yes, no, names) -> fields


def float32_below(threshold: float) -> float:
    """The float32 ``t'`` with ``x < t'`` exactly when ``x <= threshold``, for every float32
    ``x`` (LightGBM's ``<=`` as XGBoost's ``<``)."""
    floor = np.float32(threshold)
    if float(floor) > threshold:
        floor = np.nextafter(floor, np.float32(-np.inf))
    above = np.nextafter(floor, np.float32(np.inf))
    if not np.isfinite(above):
        raise ValueError(
            f"a LightGBM threshold {threshold!r} is beyond float32's range: the XGBoost dump "
            "(float32 thresholds) cannot hold it"
        )
    return float(above)


def _lightgbm_split(node: Node, yes: Node, no: Node, names: list[str]) -> dict:
    if node.get("decision_type") != "<=":
        raise ValueError(
            "a categorical LightGBM split (decision_type "
            f"{node.get('decision_type')!r}) has no XGBoost dump form: train the student on "
            "numerical features"
        )
    threshold = float(node["threshold"])
    missing_type = node.get("missing_type")
    if missing_type == "NaN":
        missing = yes if node["default_left"] else no
    elif missing_type == "None":  # LightGBM scores NaN as 0
        missing = yes if 0.0 <= threshold else no
    else:
        raise ValueError(
            f"LightGBM's missing_type {missing_type!r} (zero_as_missing) sends 0 to the "
            "default side, which the XGBoost dump cannot say: train the student with "
            "zero_as_missing=false"
        )
    return {
        "split": names[int(node["split_feature"])],
        "split_condition": float32_below(threshold),
        "missing": missing["nodeid"],
    }


def _lightgbm_children(node: Node) -> tuple[Node, Node] | None:
    if "leaf_coeff" in node:
        raise ValueError(
            "a LightGBM linear tree has no XGBoost dump form: train without linear_tree"
        )
    if "leaf_value" in node:
        return None
    return node["left_child"], node["right_child"]


_XGBOOST_FEATURE = re.compile(r"f(\d+)")


def _xgboost_split(node: Node, yes: Node, no: Node, names: list[str]) -> dict:
    feature = _XGBOOST_FEATURE.fullmatch(str(node.get("split")))
    if feature is None or "split_condition" not in node:
        raise ValueError(
            f"an XGBoost split on {node.get('split')!r} is not a numerical split of an unnamed "
            "feature (f<i>): train the student on a plain feature matrix"
        )
    missing = yes if node["missing"] == node["yes"] else no
    return {
        "split": names[int(feature.group(1))],
        "split_condition": float(np.float32(node["split_condition"])),
        "missing": missing["nodeid"],
    }


def _xgboost_children(node: Node) -> tuple[Node, Node] | None:
    if "leaf" in node:
        return None
    by_id = {child["nodeid"]: child for child in node["children"]}
    return by_id[node["yes"]], by_id[node["no"]]


def _leaf_value(node: Node) -> float:
    return float(node["leaf_value"] if "leaf_value" in node else node["leaf"])


def _rewrite_tree(
    root: Node,
    children: Callable[[Node], tuple[Node, Node] | None],
    split: Rewrite,
    names: list[str],
) -> dict:
    """One tree in the dump's layout, node ids in pre-order (iterative: no recursion limit)."""
    out_root: dict = {"nodeid": 0}
    stack = [(root, out_root, 0)]
    next_id = 1
    while stack:
        node, out, depth = stack.pop()
        pair = children(node)
        if pair is None:
            out["leaf"] = _leaf_value(node)
            continue
        yes, no = {"nodeid": next_id}, {"nodeid": next_id + 1}
        next_id += 2
        fields = split(node, yes, no, names)
        out.update(
            depth=depth,
            split=fields["split"],
            split_condition=fields["split_condition"],
            yes=yes["nodeid"],
            no=no["nodeid"],
            missing=fields["missing"],
            children=[yes, no],
        )
        stack += [(pair[1], no, depth + 1), (pair[0], yes, depth + 1)]
    return out_root


# library -> (a tree's root in its dump, its children, its split's fields)
_LAYOUTS: dict[str, tuple[Callable[[Node], Node], Callable, Rewrite]] = {
    "lightgbm": (lambda tree: tree["tree_structure"], _lightgbm_children, _lightgbm_split),
    "xgboost": (lambda tree: tree, _xgboost_children, _xgboost_split),
}


def xgboost_trees(model: StudentModel, feature_names: Sequence[str] | None = None) -> list[dict]:
    """The student's trees in XGBoost's JSON dump layout (module docstring), ``split`` naming
    ``feature_names[i]`` for feature ``i`` (None: ``feature_1 .. feature_F``)."""
    names = check_feature_names(feature_names, model.num_features)
    if model.average_output:
        raise ValueError(
            f"{model.path} averages its trees (a LightGBM random forest); the XGBoost dump adds "
            "them: train the student by boosting"
        )
    root, children, split = _LAYOUTS[model.library]
    try:
        return [_rewrite_tree(root(tree), children, split, names) for tree in model.trees]
    except ValueError as error:
        raise ValueError(f"{model.path}: {error}") from error


def xgboost_json_dump(model_file: str | Path, feature_names: Sequence[str] | None = None) -> str:
    """The ``model/xgboost+json`` definition of the student's model file ``model_file`` (read by
    :func:`~differank.rankers.students.model_files.read_student_model`: checked, loaded in a
    child process): a JSON array of trees."""
    return dump_text(xgboost_trees(read_student_model(model_file), feature_names))


def dump_text(trees: list[dict]) -> str:
    """The dump's JSON text (floats as Python writes them: each threshold's float32 exactly)."""
    return json.dumps(trees, indent=1) + "\n"

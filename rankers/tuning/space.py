"""What a tuning row searches: its fixed overrides and its space, declared once in
``conf/hparams_search/<search>.yaml`` (the files ``differank -m +hparams_search=<search>`` uses),
and the LightGBM / XGBoost reference spaces.

A row is an objective on a scorer (``listmle/linear``, ``domination/transformer``) or a
reference (``lightgbm``, ``xgboost``). On the transformer the loss's ``loss.*`` keys join the
scorer's space of ``conf/hparams_search/transformer.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from differank.rankers.run.runs import CONFIG_DIR

SEARCHES = CONFIG_DIR / "hparams_search"
SCORER_SEARCH = {"transformer": "transformer"}  # scorers whose model.* space has its own file
REFERENCES = ("lightgbm", "xgboost")  # the gradient-boosted trees every row is measured against


@dataclass(frozen=True)
class Row:
    """A table row: ``search`` names the space (conf/hparams_search) on ``scorer``; a reference
    row names its peer instead."""

    search: str
    scorer: str = "linear"
    peer: str | None = None

    @property
    def name(self) -> str:
        return f"peer_{self.peer}" if self.peer else f"{self.search}/{self.scorer}"

    @property
    def kind(self) -> str:
        """What the trial counts of a profile are keyed by: the scorer, or ``peer``."""
        return "peer" if self.peer else self.scorer

    @classmethod
    def parse(cls, text: str) -> Row:
        """``SEARCH/SCORER`` (``listmle/linear``), ``SEARCH`` (on the linear scorer) or a
        reference (``lightgbm``, ``xgboost``)."""
        name = str(text).strip()
        if name.removeprefix("peer_") in REFERENCES:
            peer = name.removeprefix("peer_")
            return cls(peer, peer=peer)
        search, _, scorer = name.partition("/")
        row = cls(search, scorer or "linear")
        row_space(row)  # a row without a search file is refused here, by name
        return row


LINEAR = ("ranknet", "listnet", "domination", "hinge", "convex")
STANDARD = (
    "lambdaloss",
    "approxndcg",
    "neuralndcg",
    "listmle",
    "softmax",
    "poly1",
    "bce",
    "mse",
    "ordinal",
    "approxmetric",
)
# Every row of the published table (benchmarks/protocol.py's full profile).
ALL_ROWS = (
    *[Row(search) for search in (*LINEAR, *STANDARD)],
    Row("cone", "conerank"),
    *[Row(search, "transformer") for search in ("domination", *STANDARD)],
    *[Row(peer, peer=peer) for peer in REFERENCES],
)


def _search_file(name: str) -> dict:
    path = SEARCHES / f"{name}.yaml"
    if not path.is_file():
        known = " ".join(sorted(p.stem for p in SEARCHES.glob("*.yaml")))
        raise ValueError(f"no search space {path}; choose from: {known}")
    return yaml.safe_load(path.read_text())


def _group_overrides(search: dict) -> list[str]:
    """``override /model: linear`` entries of a search file's defaults as ``model=linear``."""
    overrides = []
    for entry in search.get("defaults", []):
        for key, value in entry.items() if isinstance(entry, dict) else []:
            group = key.removeprefix("override ").lstrip("/")
            if not group.startswith("hydra"):
                overrides.append(f"{group}={value}")
    return overrides


def row_space(row: Row) -> tuple[list[str], dict[str, str]]:
    """The row's fixed overrides and its space ``{key: Hydra sweep expression}``."""
    search = _search_file(row.search)
    overrides = _group_overrides(search)
    params = dict(search["hydra"]["sweeper"]["params"])
    if row.scorer in SCORER_SEARCH:
        scorer = _search_file(SCORER_SEARCH[row.scorer])
        overrides = [o for o in overrides if not o.startswith("model=")]
        overrides += [o for o in _group_overrides(scorer) if o.startswith("model=")]
        params = {k: v for k, v in params.items() if k.startswith("loss.")}
        params.update(scorer["hydra"]["sweeper"]["params"])
    elif row.scorer != "linear" and not any(o == f"model={row.scorer}" for o in overrides):
        raise ValueError(f"{row.name}: the search file {row.search}.yaml is not for {row.scorer}")
    return overrides, params


def distributions(params: dict[str, str]) -> dict:
    """Optuna distributions of Hydra sweep expressions (the Optuna sweeper's own mapping)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra_plugins.hydra_optuna_sweeper._impl import (
        create_optuna_distribution_from_override,
    )

    parser = OverridesParser.create()
    parsed = parser.parse_overrides([f"{key}={value}" for key, value in params.items()])
    return {o.get_key_element(): create_optuna_distribution_from_override(o) for o in parsed}


def _hydra_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def setting_overrides(params: dict) -> list[str]:
    return [f"{key}={_hydra_value(value)}" for key, value in params.items()]


def reference_spaces() -> dict[str, dict]:
    """The references' spaces: what LightGBM users tune (Optuna's ``LightGBMTuner`` set:
    L1/L2 regularisation, leaves, feature fraction, bagging fraction and frequency, minimum
    leaf size) plus the learning rate; XGBoost's counterparts."""
    from optuna.distributions import (
        CategoricalDistribution,
        IntUniformDistribution,
        LogUniformDistribution,
        UniformDistribution,
    )

    return {
        "lightgbm": {
            "learning_rate": LogUniformDistribution(0.01, 0.3),
            "lambda_l1": LogUniformDistribution(1e-8, 10.0),
            "lambda_l2": LogUniformDistribution(1e-8, 10.0),
            "num_leaves": IntUniformDistribution(2, 256),
            "feature_fraction": UniformDistribution(0.4, 1.0),
            "bagging_fraction": UniformDistribution(0.4, 1.0),
            "bagging_freq": IntUniformDistribution(1, 7),
            "min_child_samples": IntUniformDistribution(5, 100),
        },
        "xgboost": {
            "eta": LogUniformDistribution(0.01, 0.3),
            "alpha": LogUniformDistribution(1e-8, 10.0),
            "lambda": LogUniformDistribution(1e-8, 10.0),
            "max_depth": CategoricalDistribution([3, 4, 6, 8]),
            "colsample_bytree": UniformDistribution(0.4, 1.0),
            "subsample": UniformDistribution(0.4, 1.0),
            "min_child_weight": CategoricalDistribution([1, 5, 10]),
        },
    }


# The references' settings before any search (rankers/tuning/reference.py's fixed parameters
# with these), the first trial of their search.
REFERENCE_DEFAULTS = {
    "lightgbm": {"learning_rate": 0.05, "num_leaves": 31, "min_child_samples": 20},
    "xgboost": {"eta": 0.05, "max_depth": 6, "min_child_weight": 1},
}

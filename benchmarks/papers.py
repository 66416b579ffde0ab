"""Published numbers from the seed papers, pinned as reference tables printed next to ours.

    python benchmarks/papers.py            # every pinned table as markdown

Convention: the papers report test-set means over the five LETOR folds, computed by the LETOR
evaluation tools (``Eval-Score-4.0.pl`` for LETOR 4.0; the LETOR 3.0 tool for OHSUMED and the
.gov sets); "NDCG" in ConeRank's Table 1 is the script's MeanNDCG (mean over positions of NDCG@n
per query). differank's rows use the same script's rules (docs/metrics.md#the-letor-script-rules,
``rankers/metrics/evaluate.py``) on
the same fold split, so MQ2008 rows are comparable; model selection details differ per paper.
The numbers are the published strings, copied verbatim from the texts in ``shared/papers/``;
nothing here is re-measured.
"""

from __future__ import annotations

# ConeRank (Tran & Pham), Table 1 "Results on LETOR 4.0", MQ2008 columns (MAP, NDCG); the
# baselines are the LETOR 4.0 official baseline numbers the paper quotes.
CONERANK_TABLE1_MQ2008 = {
    "source": "ConeRank (Tran & Pham) Table 1, LETOR 4.0 MQ2008",
    "columns": ["map", "mean_ndcg"],
    "rows": {
        "AdaRank-MAP": ["0.463", "0.480"],
        "AdaRank-NDCG": ["0.464", "0.477"],
        "ListNet": ["0.450", "0.469"],
        "RankBoost": ["0.467", "0.480"],
        "RankSVM-struct": ["0.450", "0.458"],
        "ConeRank-EG": ["0.444", "0.456"],
        "ConeRank-SG": ["0.454", "0.464"],
    },
}

# ConeRank Table 1, MQ2007 columns (for completeness; differank's suite runs MQ2008).
CONERANK_TABLE1_MQ2007 = {
    "source": "ConeRank (Tran & Pham) Table 1, LETOR 4.0 MQ2007",
    "columns": ["map", "mean_ndcg"],
    "rows": {
        "AdaRank-MAP": ["0.482", "0.518"],
        "AdaRank-NDCG": ["0.486", "0.517"],
        "ListNet": ["0.488", "0.524"],
        "RankBoost": ["0.489", "0.527"],
        "RankSVM-struct": ["0.489", "0.528"],
        "ConeRank-EG": ["0.488", "0.514"],
        "ConeRank-SG": ["0.492", "0.517"],
    },
}

# Stevens' thesis (domination rank by coordinate descent), Fig. 4: NDCG@5, NDCG@10, P@10. The
# thesis has no MQ2008 row; its LETOR 4.0 row is MQ2007, and it trains on queries pooled by layer
# (Sec. 8.1.2). "ListNet"/"AdaRank-NDCG"/"AdaRank-MAP"/"RankBoost" are the published baselines
# it quotes; RankSVM-struct is given for MQ2007 only.
THESIS_FIG4 = {
    "source": "Domination rank thesis, Fig. 4 (LETOR 4.0 MQ2007 and LETOR 3.0 sets)",
    "columns": ["ndcg@5", "ndcg@10", "p@10"],
    "datasets": {
        "MQ2007": {
            "DomRank-Layered": ["0.4065", "0.44", "0.3767"],
            "DomRank-Flat": ["0.415", "0.4405", "0.3776"],
            "DomRank-Margin": ["0.4149", "0.4405", "0.3776"],
            "RankSVM-struct": ["0.41426", "0.44386", "0.38332"],
            "ListNet": ["0.417", "0.444", "0.3798"],
            "AdaRank-NDCG": ["0.4102", "0.4369", "0.3756"],
            "AdaRank-MAP": ["0.407", "0.4335", "0.3738"],
            "RankBoost": ["0.4183", "0.4464", "0.3862"],
        },
        "HP2004": {
            "DomRank-Layered": ["0.7318", "0.7529", "0.0973"],
            "DomRank-Flat": ["0.7344", "0.7607", "0.0973"],
            "DomRank-Margin": ["0.7517", "0.7799", "0.0987"],
            "ListNet": ["0.7694", "0.7845", "0.0987"],
            "AdaRank-NDCG": ["0.792", "0.8057", "0.096"],
            "AdaRank-MAP": ["0.8277", "0.8328", "0.0947"],
            "RankBoost": ["0.7211", "0.7428", "0.092"],
        },
        "OHSUMED": {
            "DomRank-Layered": ["0.4759", "0.4453", "0.504"],
            "DomRank-Flat": ["0.4726", "0.4538", "0.5088"],
            "DomRank-Margin": ["0.4701", "0.4542", "0.5079"],
            "ListNet": ["0.4432", "0.441", "0.4975"],
            "AdaRank-NDCG": ["0.4673", "0.4496", "0.5087"],
            "AdaRank-MAP": ["0.4613", "0.4429", "0.4976"],
            "RankBoost": ["0.4494", "0.4302", "0.4966"],
        },
    },
}

# Dubey et al. slides (conditional models for non-smooth ranking losses), "Example accuracy
# comparison on HP2004" (LETOR 3.0 TD/HP/NP .gov set): NDCG@1, NDCG@5, NDCG@10, MAP.
SLIDES_HP2004 = {
    "source": "ConvexLoss slides (Dubey et al.), LETOR 3.0 HP2004",
    "columns": ["ndcg@1", "ndcg@5", "ndcg@10", "map"],
    "rows": {
        "SVMmap": ["0.665", "0.835", "0.845", "0.746"],
        "RankBoost": ["0.653", "0.821", "0.845", "0.739"],
        "RankSVM": ["0.695", "0.852", "0.877", "0.764"],
        "MLE": ["0.665", "0.854", "0.872", "0.755"],
        "ExpGain_AUC": ["0.695", "0.862", "0.885", "0.774"],
        "ExpGain_MAP": ["0.680", "0.875", "0.895", "0.775"],
        "ExpGain_NDCG": ["0.680", "0.872", "0.890", "0.772"],
        "L3_AUC": ["0.695", "0.880", "0.898", "0.771"],
        "L3_MAP": ["0.709", "0.883", "0.900", "0.786"],
        "L3_NDCG": ["0.681", "0.885", "0.900", "0.773"],
        "ConvexLoss_AUC": ["0.682", "0.890", "0.905", "0.778"],
        "ConvexLoss_MAP": ["0.724", "0.874", "0.885", "0.791"],
        "ConvexLoss_NDCG": ["0.709", "0.892", "0.904", "0.793"],
    },
}

HEADERS = {"map": "MAP", "mean_ndcg": "MeanNDCG"}


def _header(key: str) -> str:
    return HEADERS.get(key) or key.upper()


def table(source: str, columns: list[str], rows: dict[str, list[str]]) -> str:
    """One pinned table as markdown (values as published)."""
    lines = [
        f"**{source}** (published)",
        "",
        "| algorithm | " + " | ".join(_header(c) for c in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, values in rows.items():
        lines.append(f"| {name} | " + " | ".join(v for v in values) + " |")
    return "\n".join(lines) + "\n"


def mq2008_reference() -> dict[str, dict[str, float]]:
    """MQ2008 published rows as ``{name: {"map": ..., "mean_ndcg": ...}}`` (for plots/tables)."""
    columns = CONERANK_TABLE1_MQ2008["columns"]
    return {
        f"{name} (paper)": {c: float(v) for c, v in zip(columns, values, strict=True)}
        for name, values in CONERANK_TABLE1_MQ2008["rows"].items()
    }


def all_tables() -> str:
    parts = [__doc__.split("Convention:", 1)[1].strip().join(["Convention: ", "\n"])]
    for pinned in (CONERANK_TABLE1_MQ2008, CONERANK_TABLE1_MQ2007, SLIDES_HP2004):
        parts.append(table(pinned["source"], pinned["columns"], pinned["rows"]))
    for dataset, rows in THESIS_FIG4["datasets"].items():
        parts.append(table(f"{THESIS_FIG4['source']}: {dataset}", THESIS_FIG4["columns"], rows))
    return "\n".join(parts)


if __name__ == "__main__":
    print(all_tables())

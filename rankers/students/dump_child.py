"""The child process that reads a tree student's model file back as its trees, so that the
library's crash on a damaged or forged file ends this process, not the export (the rule of
:mod:`differank.rankers.run.booster_child`, whose memory cap it shares)::

    python -m differank.rankers.students.dump_child LIBRARY MODEL TREES.json MEMORY

writes ``{"num_features": F, "average_output": bool, "trees": [...]}``, the trees LightGBM's
``dump_model()["tree_info"]`` or XGBoost's ``get_dump(dump_format="json")`` parsed, one entry
per tree. It imports the one library and numpy only (no torch); a refusal, its own or the
library's, is exit status 1 and one line on stderr.

Public API::

    DUMPS = {"lightgbm": ..., "xgboost": ...}   # library -> (model file -> the dict written)
    main(argv) -> int
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence

from differank.rankers.run.booster_child import cap_memory


def _lightgbm(model: str) -> dict:
    import lightgbm

    booster = lightgbm.Booster(model_file=model)
    dump = booster.dump_model()
    return {
        "num_features": booster.num_feature(),
        "average_output": bool(dump.get("average_output")),  # random forest: trees averaged
        "trees": dump["tree_info"],
    }


def _xgboost(model: str) -> dict:
    import xgboost

    booster = xgboost.Booster(model_file=model)
    trees = [json.loads(tree) for tree in booster.get_dump(dump_format="json")]
    return {"num_features": booster.num_features(), "average_output": False, "trees": trees}


DUMPS: dict[str, Callable[[str], dict]] = {"lightgbm": _lightgbm, "xgboost": _xgboost}


def main(argv: Sequence[str]) -> int:
    """Write ``MODEL``'s trees to ``TREES.json``: 0, or 1 with one line on stderr saying why
    not."""
    library, model, trees_file, memory = argv
    cap_memory(int(memory))
    try:
        dump = DUMPS[library](model)
    except Exception as error:  # the library's own refusal: its first line (not its C++ stack)
        lines = str(error).strip().splitlines() or [""]
        print(f"{type(error).__name__}: {lines[0]}", file=sys.stderr)
        return 1
    with open(trees_file, "w") as out:
        json.dump(dump, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

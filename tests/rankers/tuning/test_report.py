"""What was searched: trials per row, a row with fewer trials than LightGBM marked, a row past
its budget marked, a failed trial named with its error (never a score)."""

from __future__ import annotations

from differank.rankers.tuning.report import search_table
from differank.rankers.tuning.search import RowResult, Trial
from differank.rankers.tuning.space import Row


def _trial(number: int, val_map: float | None, over_budget: bool = False) -> Trial:
    run = (
        {"fold": 1, "monitor": "val/map", "validation": val_map, "val_map": val_map}
        if val_map is not None
        else {"fold": 1, "error": "boom"}
    )
    return Trial(number, {"lr": number}, [run], 1.0, over_budget)


def test_the_search_table_marks_fewer_trials_budget_and_failures():
    reference = RowResult(Row("lightgbm", peer="lightgbm"), {"lr": 0})
    reference.trials = [_trial(0, 0.5), _trial(1, 0.6), _trial(2, 0.4)]
    reference.chosen, reference.seeds_run = reference.trials[1], 3
    short = RowResult(Row("listmle"), {"lr": 0}, over_budget=True)
    short.trials = [_trial(0, 0.55), _trial(1, None, over_budget=True)]
    short.chosen, short.seeds_run = short.trials[0], 1
    failed = RowResult(Row("ranknet"), {"lr": 0})
    failed.trials = [_trial(0, None)]
    lines = search_table([reference, short, failed]).splitlines()
    assert lines[2].startswith("| peer_lightgbm | 3 | 3 | 0.5000 | 0.6000 |")
    assert lines[2].endswith("|  |")  # the reference: nothing to mark
    assert lines[3].startswith("| listmle/linear | 2 | 1 | 0.5500 | 0.5500 |")
    assert "fewer trials than lightgbm (3); over budget; trial 1 failed: fold 1: boom" in lines[3]
    assert lines[4].startswith("| ranknet/linear | 1 | 0 | - | - | - |")
    assert "trial 0 failed: fold 1: boom" in lines[4]
    assert failed.failure == "trial 0 fold 1: boom"

"""``tune.budget``: durations parsed, anything else refused by name; shares split the time left."""

from __future__ import annotations

import pytest

from differank.rankers.tuning.budget import Budget, RowBudget, parse_budget


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("0.5m", 30), (" 20M ", 1200)],
)
def test_a_duration_is_read_in_seconds(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", [None, "null", "none", ""])
def test_no_budget_is_no_limit(text):
    assert parse_budget(text) is None


@pytest.mark.parametrize("text", ["30", "30 min", "m30", "2d", "-5m", "0s", "1h 30m", 45])
def test_anything_else_is_refused_naming_the_accepted_forms(text):
    with pytest.raises(ValueError, match=r"tune.budget=.*(90s, 30m, 2h|longer than 0)"):
        parse_budget(text)


def test_each_row_gets_an_equal_share_of_the_time_left():
    budget = Budget(600.0)
    assert budget.share(3).seconds == pytest.approx(200.0, abs=1.0)
    assert Budget(None).share(3).seconds == float("inf")


def test_a_share_holds_only_work_that_ends_within_it():
    share = RowBudget(10.0)
    assert share.holds(5.0) and not share.holds(11.0)

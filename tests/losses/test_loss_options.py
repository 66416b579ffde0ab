"""Every numeric hyperparameter of every loss of tests/loss_registry.py is checked by name, in
the function and in the module: NaN, infinities and values outside its range are refused with
the loss, the option, the value and the allowed range (losses/options.py's ``Allowed``). The
values to try are each registry entry's ``refuses``."""

from __future__ import annotations

import inspect
import math
import re

import pytest
import torch

from differank.losses.options import Allowed
from tests.loss_registry import CASES

NON_FINITE = [math.nan, math.inf, -math.inf]  # refused for every numeric option


def bad_options() -> list:
    """(case, option, value) for each value a registry entry's ``refuses`` lists, and NaN and
    both infinities for each of its options."""
    return [
        pytest.param(case, option, value, id=f"{case.name}-{option}={value!r}")
        for case in CASES.values()
        for option, values in case.refuses.items()
        for value in NON_FINITE + list(values)
    ]


def test_every_loss_states_what_each_numeric_option_refuses():
    listed: dict = {}
    for case in CASES.values():
        listed.setdefault(case.function, set()).update(case.refuses)
    for function, options in listed.items():
        keywords = inspect.signature(function).parameters.values()
        numeric = {
            p.name
            for p in keywords
            if p.kind is p.KEYWORD_ONLY
            and isinstance(p.default, (int, float))
            and not isinstance(p.default, bool)
        }
        missing = numeric - options
        assert not missing, f"{function.__name__}: give {missing} a LossCase.refuses entry"


def _refused(error: pytest.ExceptionInfo, names: tuple[str, ...], option: str, value) -> None:
    message = str(error.value)
    assert re.match(rf"({'|'.join(names)}): {option} must be ", message), message
    assert f"got {value!r}" in message and ("integer" in message or "number" in message)


@pytest.mark.parametrize(("case", "option", "value"), bad_options())
def test_the_function_refuses_the_value_by_name(case, option, value):
    values, labels, mask = case.make_batch()
    with pytest.raises(ValueError) as error:
        case.function(values, labels, mask, *case.inputs(values, labels, mask),
                      **{**case.options, option: value})  # fmt: skip
    _refused(error, (case.function.__name__, "cone_fold_in"), option, value)


@pytest.mark.parametrize(("case", "option", "value"), bad_options())
def test_the_module_refuses_the_value_when_built(case, option, value):
    with pytest.raises(ValueError) as error:
        case.module(**{**case.options, option: value})
    names = (case.function.__name__, case.module.__name__, "cone_fold_in")
    _refused(error, names, option, value)


@pytest.mark.parametrize(
    ("allowed", "text"),
    [
        (Allowed(), "a finite number"),
        (Allowed(low=0.0, low_open=True), "a finite number > 0"),
        (Allowed(low=1, integer=True, optional=True), "an integer >= 1 or None"),
        (Allowed(low=0.0, high=1.0), "a finite number in [0, 1]"),
    ],
)
def test_the_allowed_range_is_stated(allowed, text):
    assert str(allowed) == text
    assert not allowed.admits(math.nan) and not allowed.admits(math.inf)


def test_the_boundaries_and_tensors():
    unit = Allowed(low=0.0, high=1.0)
    assert unit.admits(0) and unit.admits(1.0) and not unit.admits(1.0 + 1e-12)
    assert not Allowed(low=0.0, low_open=True).admits(0.0)
    assert Allowed(low=1, integer=True).admits(1) and not Allowed(low=1, integer=True).admits(1.0)
    assert not Allowed().admits("1.0") and not Allowed().admits(None)
    assert Allowed().admits(torch.tensor(math.nan)), "a tensor is left to the loss, never read"

"""Hyperparameters as data: a loss with many options keeps them in one frozen dataclass,
validated once in its ``__post_init__`` and passed around as one object.

Every numeric option of every loss is checked by one rule, :class:`Allowed`: a range whose
infinite ends are open (so NaN and infinities are always refused), optionally integers only,
optionally ``None``. ``Allowed.check(loss, **values)`` raises a ``ValueError`` naming the loss,
the option, the value and the allowed range. It reads Python numbers only: a tensor given as an
option is left to the loss (reading it would sync an accelerator).

The public functions and modules still take the options as keywords (their contract); they build
the dataclass once from ``**options``. :func:`keyword_options` gives such a callable the signature
it accepts, so ``help()``, ``inspect.signature`` and the config tests see every option and its
default, written only in the dataclass.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import TypeVar

import torch

Function = TypeVar("Function", bound=Callable)


@dataclasses.dataclass(frozen=True)
class Allowed:
    """The values a numeric loss option may take: ``low <= value <= high`` (``low < value``
    with ``low_open``), always finite; whole numbers only with ``integer``; ``None`` too with
    ``optional``.

    Example:
        >>> POSITIVE.check("lambda_loss", sigma=1.0, eps=0.0)
        Traceback (most recent call last):
        ...
        ValueError: lambda_loss: eps must be a finite number > 0, got 0.0
    """

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    integer: bool = False
    optional: bool = False

    def admits(self, value) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, torch.Tensor):  # not read here: that would sync an accelerator
            return True
        kind = int if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind):
            return False
        above = value > self.low if self.low_open or self.low == -math.inf else value >= self.low
        return above and value <= self.high and value < math.inf  # NaN fails every comparison

    def check(self, loss: str, **values) -> None:
        """Raise a ``ValueError`` for the first of ``values`` (option name -> value) outside."""
        for name, value in values.items():
            if not self.admits(value):
                raise ValueError(f"{loss}: {name} must be {self}, got {value!r}")

    def __str__(self) -> str:
        what = "an integer" if self.integer else "a finite number"
        if self.high < math.inf:
            what += f" in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        elif self.low > -math.inf:
            what += f" {'>' if self.low_open else '>='} {self.low:g}"
        return what + (" or None" if self.optional else "")


FINITE = Allowed()
POSITIVE = Allowed(low=0.0, low_open=True)
NON_NEGATIVE = Allowed(low=0.0)
COUNT = Allowed(low=1, integer=True)
OPTIONAL_COUNT = Allowed(low=1, integer=True, optional=True)
OPTIONAL_POSITIVE = Allowed(low=0.0, low_open=True, optional=True)


def keyword_options(options_class: type) -> Callable[[Function], Function]:
    """Decorate a callable whose ``**options`` are the fields of the dataclass ``options_class``:
    its signature lists each field as a keyword-only parameter with the field's default, placed
    before the callable's own keyword-only parameters.

    Example:
        >>> @dataclasses.dataclass(frozen=True)
        ... class Options:
        ...     width: int = 3
        >>> @keyword_options(Options)
        ... def area(height, *, reduction="mean", **options):
        ...     return height * Options(**options).width
        >>> inspect.signature(area)
        <Signature (height, *, width=3, reduction='mean')>
    """

    def decorate(function: Function) -> Function:
        signature = inspect.signature(function)
        own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        fields = [
            inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default)
            for field in dataclasses.fields(options_class)
        ]
        first_keyword = next((i for i, p in enumerate(own) if p.kind is p.KEYWORD_ONLY), len(own))
        parameters = own[:first_keyword] + fields + own[first_keyword:]
        # inspect reads __signature__ from any callable; typeshed's callables do not declare it
        function.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=parameters
        )
        return function

    return decorate

"""Hyperparameters as data: a loss with many options keeps them in one frozen dataclass,
validated once in its ``__post_init__`` and passed around as one object.

The public functions and modules still take the options as keywords (their contract); they build
the dataclass once from ``**options``. :func:`keyword_options` gives such a callable the signature
it accepts, so ``help()``, ``inspect.signature`` and the config tests see every option and its
default, written only in the dataclass.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import TypeVar

Function = TypeVar("Function", bound=Callable)


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
        function.__signature__ = signature.replace(parameters=parameters)
        return function

    return decorate

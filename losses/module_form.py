"""The ``nn.Module`` form of a loss function, written once: a subclass names its function, and
gets a constructor taking the function's keyword options (same names, same defaults, so
``inspect.signature`` and Hydra see them), a ``forward(scores, labels, mask=None)`` calling the
function with them, and a ``repr`` listing them.

Losses whose module does more than store options (ConeRank's basis and warm start, ConvexLoss'
sample refresh, the domination loss' margin buffer) keep a class of their own.
:func:`loss_classes` finds every loss class, of either kind, in the files of ``losses/``.

Every loss class states how its memory grows with the list length L as ``memory``, a
:class:`ListMemory` (:data:`LISTWISE` O(B·L), :data:`PAIRWISE` O(B·L²)): a class attribute set
by ``class FooLoss(LossModule, function=foo_loss, memory=LISTWISE)``, or a property where the
options decide. The training module refuses a batch whose need passes the memory budget before
the allocator sees it (:mod:`differank.rankers.training.list_memory`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn


@dataclass(frozen=True)
class ListMemory:
    """A loss's memory for a batch of B lists of L slots: ``tensors`` tensors of ``B·L^power``
    elements of the compute dtype alive at the peak of forward + backward (an estimate, meant
    to catch the request no machine holds, not to budget to the byte).

    Example:
        >>> round(PAIRWISE.bytes(batch=1, length=10**6, itemsize=4) / 2**40, 1)  # TiB: one query
        21.8
        >>> str(PAIRWISE), str(LISTWISE)
        ('O(B·L²)', 'O(B·L)')
    """

    power: int  # 1: O(B·L) (pointwise, listwise, sampled); 2: O(B·L²) (every pair)
    tensors: int

    def bytes(self, batch: int, length: int, itemsize: int) -> int:
        return self.tensors * batch * length**self.power * itemsize

    def longest_list(self, batch: int, itemsize: int, budget: int) -> int:
        """The longest list L whose batch of ``batch`` lists needs at most ``budget`` bytes."""
        per_slot = budget / (self.tensors * batch * itemsize)
        length = int(per_slot ** (1 / self.power))
        while length > 0 and self.bytes(batch, length, itemsize) > budget:  # float rounding
            length -= 1
        return length

    def __str__(self) -> str:
        return "O(B·L)" if self.power == 1 else f"O(B·L{'²' if self.power == 2 else self.power})"


# A few [B, L] tensors per document: the listwise and pointwise losses' scores, labels, masks,
# softmax or cumulative sums and their gradients.
LISTWISE = ListMemory(power=1, tensors=16)
# [B, L, L] tensors of the compute dtype besides the bool pair mask: RankNet's float32 step at
# B = 4, L = 2000 peaked at 21 bytes per pair on the CPU, about 5 tensors and a mask.
PAIRWISE = ListMemory(power=2, tensors=6)


class LossModule(nn.Module):
    """Module form of a list loss ``function(scores, labels, mask=None, *, **options)``.

    Example:
        >>> from differank.losses.listnet import listnet_loss
        >>> class ListNet(LossModule, function=listnet_loss):
        ...     pass
        >>> ListNet(reduction="sum")
        ListNet(reduction='sum')
        >>> ListNet(reduction="max")
        Traceback (most recent call last):
        ...
        ValueError: reduction must be one of ('none', 'mean', 'sum'), got 'max'
    """

    function: ClassVar[Callable[..., torch.Tensor]]
    memory: ClassVar[ListMemory]  # how the loss's memory grows with L (module docstring)

    def __init_subclass__(
        cls,
        *,
        function: Callable[..., torch.Tensor] | None = None,
        memory: ListMemory | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if memory is not None:
            cls.memory = memory
        if function is None:  # a subclass of a loss module keeps its parent's function
            return
        cls.function = staticmethod(function)
        keywords = [
            parameter
            for parameter in inspect.signature(function).parameters.values()
            if parameter.kind is parameter.KEYWORD_ONLY
        ]

        def __init__(self, **options: Any) -> None:
            LossModule.__init__(self, **options)

        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        # inspect reads __signature__ from any callable; typeshed's functions do not declare it
        __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [self_parameter, *keywords]
        )
        __init__.__doc__ = f"The keyword options of :func:`{function.__name__}`."
        # the class's methods are made here, from its function: assigning them is the point
        # (and LossModule.forward, read from the class, is the plain function mypy calls a method)
        cls.__init__ = __init__  # type: ignore[method-assign]
        cls.forward = _own_copy(LossModule.forward, cls)  # type: ignore[method-assign, arg-type]
        if cls.__doc__ is None:
            cls.__doc__ = f"Module form of :func:`{function.__name__}`."

    def __init__(self, **options: Any) -> None:
        super().__init__()
        bound = inspect.signature(type(self).__init__).bind(self, **options)  # unknown names fail
        bound.apply_defaults()
        self.options = {name: value for name, value in bound.arguments.items() if name != "self"}
        # Validated by the function itself on one two-document query, so the module refuses
        # exactly what a call would; the RNG is forked, so a stochastic loss (random ties,
        # Gumbel samples) draws nothing from the caller's stream.
        with torch.random.fork_rng(devices=[]):
            self.function(torch.zeros(2), torch.tensor([1.0, 0.0]), **self.options)
        for name, value in self.options.items():
            setattr(self, name, value)

    def forward(
        self, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The loss function with this module's options.

        Shape:
            scores [B, L] (one query: [L]); labels, mask like scores (``mask=None``: every
            document is real) -> [B] for ``reduction="none"`` ([] for one query), else a scalar.
        """
        return self.function(scores, labels, mask, **self.options)

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={value!r}" for name, value in self.options.items())


def _own_copy(method: types.FunctionType, cls: type) -> types.FunctionType:
    """``method`` with a code object of its own for ``cls``: torch.compile caches graphs and
    counts recompilations per code object, so one shared ``forward`` would let a process that
    compiles more than 8 loss classes hit its recompile limit. ``code.replace()`` always builds
    a new code object; where code objects carry a qualified name (Python 3.11+) it names
    ``cls`` too, so tracebacks and compile logs say which loss ran."""
    qualname = f"{cls.__qualname__}.{method.__name__}"
    if hasattr(method.__code__, "co_qualname"):  # mypy checks as Python 3.10, which has none
        code = method.__code__.replace(co_qualname=qualname)  # type: ignore[call-arg]
    else:  # Python 3.10: no co_qualname, the function's __qualname__ alone names the class
        code = method.__code__.replace()
    copy = types.FunctionType(code, method.__globals__, method.__name__, method.__defaults__)
    copy.__doc__, copy.__annotations__ = method.__doc__, method.__annotations__
    copy.__qualname__ = qualname
    return copy


def loss_classes() -> list[type[nn.Module]]:
    """Every loss module class of ``differank.losses``: the public ``nn.Module`` classes defined
    in its modules (``losses/*.py``), exported from ``differank.losses`` or not.

    What a checkpoint may name (``differank.rankers.checkpoints.ALLOWED_TARGETS``) and
    what tests/loss_registry.py must cover derive from it, so a new loss file needs no list of
    its own (docs/architecture.md#how-to-add-a-loss).
    """
    package = importlib.import_module("differank.losses")
    classes = []
    for found in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        if found.ispkg or found.name.rpartition(".")[2].startswith("_"):
            continue  # losses/algorithms/ holds building blocks, not losses
        module = importlib.import_module(found.name)
        classes += [
            value
            for name, value in vars(module).items()
            if isinstance(value, type)
            and issubclass(value, nn.Module)
            and value.__module__ == module.__name__
            and value is not LossModule
            and not name.startswith("_")
        ]
    return sorted(classes, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")

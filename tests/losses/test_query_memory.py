"""The memory of one huge query (issue #41): every loss states how its memory grows with the
list length, and the training module refuses a batch whose need passes the memory budget before
the ranker or the loss allocates anything, naming the list length, the loss, the bytes and the
fix; a normal batch passes."""

from __future__ import annotations

import time
from functools import partial

import pytest
import torch

from differank.losses import LambdaLoss, ListMLELoss, RankNetLoss
from differank.losses.module_form import LISTWISE, PAIRWISE, ListMemory, loss_classes
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.training import list_memory
from differank.rankers.training.list_memory import check_batch_memory
from differank.rankers.training.module import RankingModule

N_FEATURES = 3


def ranking_module(loss) -> RankingModule:
    return RankingModule(
        ranker=partial(LinearRanker),
        loss=loss,
        optimizer=partial(torch.optim.SGD, lr=0.1),
        n_features=N_FEATURES,
    )


def query_batch(batch: int, length: int) -> dict[str, torch.Tensor]:
    """A batch of ``batch`` lists of ``length`` real documents; the features are one expanded
    row, so even a list of 10^6 documents costs no memory to forge."""
    shape = (batch, length)
    return {
        "features": torch.ones(1, 1, N_FEATURES).expand(*shape, N_FEATURES),
        "labels": (torch.arange(length) % 3).float().expand(shape),
        "mask": torch.ones(1, 1, dtype=torch.bool).expand(shape),
    }


@pytest.mark.parametrize("cls", loss_classes(), ids=lambda cls: cls.__name__)
def test_query_memory_every_loss_states_its_growth_in_the_list_length(cls):
    memory = cls().memory
    assert isinstance(memory, ListMemory) and memory.power in (1, 2)


def test_query_memory_pairwise_and_listwise_losses_state_their_order():
    assert RankNetLoss().memory == LambdaLoss().memory == PAIRWISE
    assert ListMLELoss().memory == LISTWISE
    assert str(PAIRWISE) == "O(B·L²)" and str(LISTWISE) == "O(B·L)"


@pytest.mark.parametrize("loss", [LambdaLoss(), RankNetLoss()], ids=["lambdaloss", "ranknet"])
def test_query_memory_one_huge_query_is_refused_before_anything_is_allocated(monkeypatch, loss):
    """One query of 10^6 documents under a pairwise loss needs terabytes: refused in well under a
    second, before the ranker runs (it would fail the test), naming the length, the loss, the
    bytes and ``data.max_list``."""
    module = ranking_module(loss)

    def ranker_ran(batch):
        raise AssertionError("the ranker ran before the batch's memory was checked")

    monkeypatch.setattr(module, "loss_target", ranker_ran)
    start = time.perf_counter()
    with pytest.raises(ValueError) as refused:
        module.training_step(query_batch(1, 10**6), 0)
    assert time.perf_counter() - start < 1.0
    message = str(refused.value)
    for named in (type(loss).__name__, "O(B·L²)", "1,000,000 documents", "TiB", "data.max_list="):
        assert named in message


def test_query_memory_a_normal_batch_passes():
    """32 lists of 121 documents (MQ2008's longest) under a pairwise loss: a finite loss."""
    module = ranking_module(RankNetLoss())
    batch = query_batch(32, 121)
    assert torch.isfinite(module.training_step({**batch, "features": torch.randn(32, 121, 3)}, 0))


def test_query_memory_a_listwise_loss_takes_the_huge_query():
    """The fix the message names: a listwise loss needs O(B·L), which 10^6 documents fit."""
    check_batch_memory(ListMLELoss(), query_batch(1, 10**6)["mask"], torch.float32)


def test_query_memory_the_named_max_list_fits_the_budget(monkeypatch):
    """With a budget of 1 GiB, the refusal's ``data.max_list=N`` is the longest list that fits:
    N passes the check and N + 1 does not."""
    monkeypatch.setattr(list_memory, "memory_budget", lambda device: 2**30)
    mask = torch.ones(32, 10_000, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"data\.max_list=") as refused:
        check_batch_memory(RankNetLoss(), mask, torch.float32)
    longest = int(str(refused.value).split("data.max_list=")[1].split()[0])
    assert 2 < longest < 10_000
    check_batch_memory(RankNetLoss(), mask[:, :longest], torch.float32)
    # half scores are computed in float32: the same bound
    with pytest.raises(ValueError, match=r"data\.max_list="):
        check_batch_memory(RankNetLoss(), mask[:, : longest + 1], torch.float16)

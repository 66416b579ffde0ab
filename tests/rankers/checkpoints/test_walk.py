"""One room for checkpoint trust (issue #40): the walk of one prediction from a checkpoint file,
``differank.load_ranker(path)`` then scoring a batch, is traced call by call and the rooms it
enters are counted.

A room is a ``differank`` folder (``differank.rankers.scorers``, ``differank.datamodules``, ...;
the checkpoint room is ``differank.rankers.checkpoints`` with its modules). The walk enters a
room when a frame of it is called from outside it: from the test, from torch or from another
room's frame. Reading, validating, restoring and serving live in the checkpoint room, so the
walk enters it once to load and once to score; it enters the ranker's room to plan the ranker
(meta device), build it, take its serving form and score, and the transform's to check its
tables, build it and apply it: no room is returned to more than 3 times. Before the room, the
same walk returned 5 times to ``differank.rankers.training`` (which held ``checkpoints.py``),
and 7 times in all to the three files that held the trust work."""

import sys
from collections import Counter

import pytest
import torch

import differank
from differank.rankers.checkpoints import build, load_checkpoint

ROOM = "differank.rankers.checkpoints"
MAX_RETURNS = 3  # issue #40: "the prediction walk returns to a room at most 3 times"
N_FEATURES = 5


def room_of(frame) -> str | None:
    """The differank folder of ``frame``'s code (the checkpoint room as one), else None."""
    name = frame.f_globals.get("__name__", "")
    if not name.startswith("differank."):
        return None
    if name.startswith(ROOM):
        return ROOM
    package = frame.f_globals.get("__file__", "").endswith("__init__.py")
    return name if package else name.rpartition(".")[0]


def entered(walk) -> list[str]:
    """The rooms ``walk()`` enters, in order: one entry per call into a room from outside it."""
    rooms, stack = [], []

    def profile(frame, event, arg):
        if event == "call":
            room = room_of(frame)
            caller = next((r for r in reversed(stack) if r is not None), None)
            if room is not None and room != caller:
                rooms.append(room)
            stack.append(room)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        walk()
    finally:
        sys.setprofile(None)
    return rooms


def returns(rooms: list[str]) -> Counter:
    """How often each room is entered again after its first visit."""
    return Counter(rooms) - Counter(set(rooms))


@pytest.fixture
def checkpoint(tmp_path):
    """A ``train.py``-style checkpoint of an MLP behind a GaussRank transform and a z-score,
    written by hand (no training needed)."""
    model = {
        "_target_": "differank.rankers.training.module.RankingModule",
        "ranker": {
            "_target_": "differank.rankers.scorers.mlp.MLPRanker",
            "_partial_": True,
            "hidden": [4],
        },
        "optimizer": {"_target_": "torch.optim.Adam", "_partial_": True, "lr": 0.001},
    }
    loss = {"_target_": "differank.losses.listnet.ListNetLoss"}
    module = build(model, "model", loss=build(loss, "loss"), n_features=N_FEATURES)
    knots = torch.linspace(-1.0, 1.0, 4).repeat(N_FEATURES, 1)
    serving = {
        "n_features": N_FEATURES,
        "normalization": "zscore",
        "mean": torch.zeros(N_FEATURES, dtype=torch.float64),
        "std": torch.ones(N_FEATURES, dtype=torch.float64),
        "transform": {"name": "gaussrank", "knots": knots, "values": knots * 2.0},
    }
    path = tmp_path / "best.ckpt"
    record = {"config": {"model": model, "loss": loss}, "monitor": "val/map", "serving": serving}
    torch.save({"state_dict": module.state_dict(), "epoch": 0, "differank": record}, path)
    return path


def test_a_prediction_returns_to_no_room_more_than_three_times(checkpoint):
    features = torch.randn(2, 3, N_FEATURES, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[True, True, True], [True, True, False]])

    def walk():
        with torch.no_grad():
            return differank.load_ranker(checkpoint)(features, mask)

    walk()  # imports and first-call caches happen outside the trace
    rooms = entered(walk)
    assert rooms[0] == ROOM and "differank.rankers.scorers" in rooms, rooms
    assert returns(rooms)[ROOM] == 1, rooms  # the scoring call
    assert max(returns(rooms).values()) <= MAX_RETURNS, rooms


def test_the_trace_counts_each_return_to_a_room(checkpoint):
    """The measure can fail: a walk that calls into the room five times returns to it four."""
    load_checkpoint(checkpoint)
    rooms = entered(lambda: [load_checkpoint(checkpoint) for _ in range(5)])
    assert returns(rooms)[ROOM] == 4, rooms

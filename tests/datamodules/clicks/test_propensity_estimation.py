"""Propensity estimation recovers a known PBM η (to within 0.05) from simulated logs: by result
swapping (randomisation) and by intervention harvesting across several logging rankers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from differank.datamodules.clicks.click_log import ClickLog
from differank.datamodules.clicks.examination import examination_curve
from differank.datamodules.clicks.pbm import PositionBasedModel
from differank.datamodules.clicks.propensity_estimation import (
    apply_swaps,
    fit_eta,
    propensities_from_rankers,
    propensities_from_swaps,
    swap_sessions,
)

K = 10
CURVE = examination_curve("eye_tracking", K, eta=1.0)


def ranked_lists(queries: int, seed: int) -> torch.Tensor:
    """Labels [queries, K] of lists as a fair production ranker orders them (best first)."""
    labels = torch.randint(0, 3, (queries, K), generator=torch.Generator().manual_seed(seed))
    return labels.float().sort(dim=1, descending=True).values


@pytest.mark.parametrize("eta", [0.5, 1.0, 2.0])
def test_result_swapping_recovers_eta(eta):
    generator = torch.Generator().manual_seed(11)
    lists = ranked_lists(100, seed=1)
    sessions = 200_000
    swaps = swap_sessions(sessions, K, generator)
    shown = apply_swaps(lists[torch.arange(sessions) % len(lists)], swaps)
    model = PositionBasedModel(max_label=2, eta=eta, positions=K)
    clicks = model.simulate(shown, torch.ones_like(shown, dtype=torch.bool), generator)
    relative = propensities_from_swaps(clicks, swaps)
    assert abs(fit_eta(relative, CURVE) - eta) < 0.05
    truth = (CURVE / CURVE[0]) ** eta
    assert torch.allclose(relative[:4], truth[:4], rtol=0.1)  # the well-sampled positions


def test_intervention_harvesting_across_rankers_recovers_eta():
    eta, queries, per_query = 1.0, 300, 200
    labels = torch.randint(0, 3, (queries, K), generator=torch.Generator().manual_seed(2)).float()
    model = PositionBasedModel(max_label=2, eta=eta, positions=K)
    generator = torch.Generator().manual_seed(5)
    logs = []
    for ranker in range(3):  # three deterministic rankers: one fixed order of each query each
        order = torch.argsort(
            torch.rand(queries, K, generator=torch.Generator().manual_seed(ranker)), 1
        )
        shown = labels.gather(1, order).repeat(per_query, 1)
        clicks = model.simulate(shown, torch.ones_like(shown, dtype=torch.bool), generator)
        doc_row = (torch.arange(queries)[:, None] * K + order).repeat(per_query, 1)
        sessions = len(shown)
        logs.append(
            ClickLog(
                session=np.repeat(np.arange(sessions), K),
                qid=np.repeat(np.arange(sessions) % queries, K),
                position=np.tile(np.arange(K), sessions),
                click=clicks.flatten().numpy().astype(np.uint8),
                doc_row=doc_row.flatten().numpy(),
            )
        )
    relative = propensities_from_rankers(logs, K)
    assert abs(fit_eta(relative, CURVE.numpy()) - eta) < 0.05
    # one ranker alone shows no document at two positions: nothing to harvest
    with pytest.raises(ValueError, match="at least two rankers"):
        propensities_from_rankers(logs[:1], K)


def test_apply_swaps_moves_the_top_document_to_the_swapped_position():
    lists = torch.arange(12).view(3, 4)
    shown = apply_swaps(lists, torch.tensor([0, 3, 1]))
    assert shown.tolist() == [[0, 1, 2, 3], [7, 5, 6, 4], [9, 8, 10, 11]]

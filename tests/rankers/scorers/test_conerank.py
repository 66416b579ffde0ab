"""ConeRank ranker: basis constraint, Algorithm 2 vs its closed form, linear export
(docs/objectives/conerank.md#prediction-algorithm-2)."""

from __future__ import annotations

import warnings

import pytest
import torch

from differank.losses.cone import ConeLoss
from differank.rankers.scorers.conerank import ConeRank, tie_rule_scores
from differank.rankers.scorers.linear import LinearRanker
from tests.oracles import cone_fold_in_exact


def order_by_tie_rule(scores, mask):
    """Real documents sorted by (score desc, index desc): Algorithm 2's order
    (docs/objectives/conerank.md#prediction-algorithm-2)."""
    real = [i for i in range(len(scores)) if mask[i]]
    return sorted(real, key=lambda i: (-float(scores[i]), -i))


def batch_with_duplicates(seed=0, n_features=6):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(3, 8, n_features, generator=g, dtype=torch.float64)
    features[:, 4] = features[:, 1]  # duplicate documents
    features[:, 6] = features[:, 1]
    features[0, 7] = features[0, 2]
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[2, 5:] = False
    return features, mask


class TestConeRank:
    @pytest.mark.parametrize("n_basis", [3, 6, 9])  # K < F, K = F, K > F (pseudo-inverse)
    def test_algorithm2_votes_equal_closed_form_ranking(self, n_basis):
        features, mask = batch_with_duplicates()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ranker = ConeRank(6, n_basis=n_basis, seed=1).double()
        assert (len(caught) > 0) == (n_basis > 6)  # K > F warns
        votes = ranker.algorithm2_scores(features, mask)
        scores = ranker(features).detach()
        for b in range(features.shape[0]):
            n = int(mask[b].sum())
            by_votes = sorted(range(n), key=lambda i: -float(votes[b, i]))
            assert by_votes == order_by_tie_rule(scores[b], mask[b])
            # votes are a permutation of 0..n-1 (no vote ties), 0 at padding
            assert sorted(votes[b, :n].tolist()) == list(range(n))
            assert torch.all(votes[b, n:] == 0)
        exact = tie_rule_scores(scores, mask)
        torch.testing.assert_close(exact, torch.where(mask, votes + 1, 0.0))

    def test_sum_of_fold_in_is_linear_score(self):
        ranker = ConeRank(5, n_basis=3, seed=2).double()
        z = torch.randn(10, 5, dtype=torch.float64)
        w = torch.linalg.lstsq(ranker.basis.detach(), z.T).solution.T  # min-norm, full rank
        torch.testing.assert_close(w.sum(-1), z @ ranker.direction().detach())

    def test_rank_prediction_option(self):
        features, mask = batch_with_duplicates()
        ranker = ConeRank(6, n_basis=4, seed=3, prediction="rank").double()
        votes = ranker.algorithm2_scores(features, mask)
        torch.testing.assert_close(ranker(features, mask), torch.where(mask, votes + 1, 0.0))

    @pytest.mark.parametrize("constraint", ["simplex", "cone"])
    def test_two_direction_rule_matches_oracle_votes(self, constraint):
        features, mask = batch_with_duplicates(seed=5)
        ranker = ConeRank(6, n_basis=4, seed=6, prediction="two_direction", constraint=constraint)
        ranker = ranker.double()
        scores = ranker(features, mask)
        basis = ranker.basis.detach().numpy()
        for b in range(features.shape[0]):
            n = int(mask[b].sum())
            votes = [0] * n
            for l in range(n):
                for m in range(l + 1, n):
                    z = features[b, l] - features[b, m]
                    z = ranker.rho * z / (1.0 + z.norm())
                    ahead = cone_fold_in_exact(z.numpy(), basis, constraint)[1]
                    behind = cone_fold_in_exact(-z.numpy(), basis, constraint)[1]
                    votes[l if ahead < behind - 1e-9 else m] += 1
            assert torch.equal(scores[b, :n].floor(), torch.tensor(votes, dtype=torch.float64))
            assert torch.all(scores[b, n:] == 0)
        # without a mask, all-zero rows are taken as padding
        padded = torch.where(mask.unsqueeze(-1), features, 0.0)
        torch.testing.assert_close(ranker(padded), scores)

    def test_init_inside_ball_and_constrain_after_steps(self):
        ranker = ConeRank(10, n_basis=4, seed=0)
        radius = ranker.radius
        assert radius == pytest.approx(2 * 10**0.5)
        assert torch.all(ranker.basis.norm(dim=0) <= radius + 1e-5)
        optimizer = torch.optim.SGD(ranker.parameters(), lr=10.0)
        loss_fn = ConeLoss()
        features = 5 * torch.randn(4, 6, 10)
        labels = torch.randint(0, 3, (4, 6)).float()
        mask = torch.ones(4, 6, dtype=torch.bool)
        for _ in range(5):
            optimizer.zero_grad()
            loss = loss_fn(ranker.loss_target(features), labels, mask, **ranker.loss_inputs())
            (loss - 100 * ranker.basis.norm()).backward()  # push the columns outwards
            optimizer.step()
            ranker.constrain()
            norms = ranker.basis.norm(dim=0)
            assert torch.all(norms <= radius * (1 + 1e-6))
        assert torch.allclose(norms, torch.full_like(norms, radius))

    def test_constrain_leaves_inner_columns(self):
        ranker = ConeRank(4, n_basis=2, radius=1.0, seed=0)
        with torch.no_grad():
            ranker.basis.copy_(torch.tensor([[0.3, 3.0], [0.4, 4.0], [0.0, 0.0], [0.0, 0.0]]))
        ranker.constrain()
        torch.testing.assert_close(ranker.basis[:, 0], torch.tensor([0.3, 0.4, 0.0, 0.0]))
        torch.testing.assert_close(ranker.basis[:, 1], torch.tensor([0.6, 0.8, 0.0, 0.0]))

    def test_export_linear_gives_same_scores(self):
        ranker = ConeRank(7, n_basis=4, seed=4)
        features = torch.randn(2, 5, 7)
        linear = ranker.export_linear()
        assert isinstance(linear, LinearRanker)
        torch.testing.assert_close(linear(features), ranker(features), rtol=1e-5, atol=1e-5)

    def test_encoder_option(self):
        ranker = ConeRank(7, n_basis=3, encoder_hidden=[16], embed_dim=5, seed=0)
        features = torch.randn(2, 4, 7)
        assert ranker.loss_target(features).shape == (2, 4, 5)
        assert ranker.loss_inputs()["basis"].shape == (5, 3)
        assert ranker(features).shape == (2, 4)
        labels = torch.tensor([[2.0, 1.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
        loss = ConeLoss()(ranker.loss_target(features), labels, torch.ones(2, 4, dtype=torch.bool),
                          **ranker.loss_inputs())  # fmt: skip
        loss.backward()
        assert all(p.grad is not None for p in ranker.parameters())
        with pytest.raises(ValueError, match="identity encoder"):
            ranker.export_linear()

    def test_training_lowers_the_loss(self):
        g = torch.Generator().manual_seed(0)
        truth = torch.randn(6, generator=g)
        features = torch.randn(16, 10, 6, generator=g)
        labels = torch.bucketize(features @ truth, torch.tensor([-0.5, 0.8])).float()
        mask = torch.ones(16, 10, dtype=torch.bool)
        ranker = ConeRank(6, n_basis=3, seed=0)
        optimizer = torch.optim.Adam(ranker.parameters(), lr=0.05)
        loss_fn = ConeLoss()
        losses = []
        for _ in range(30):
            optimizer.zero_grad()
            loss = loss_fn(ranker.loss_target(features), labels, mask, **ranker.loss_inputs())
            loss.backward()
            optimizer.step()
            ranker.constrain()
            losses.append(loss.item())
        assert losses[-1] < 0.7 * losses[0]

    @pytest.mark.parametrize(
        "kwargs",
        [{"n_features": 0}, {"n_basis": 0}, {"prediction": "votes"}, {"radius": -1.0},
         {"init_scale": 0.0}, {"embed_dim": 3}],
    )  # fmt: skip
    def test_bad_arguments(self, kwargs):
        with pytest.raises(ValueError):
            ConeRank(**{"n_features": 5, **kwargs})

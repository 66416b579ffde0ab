"""The standard objectives (docs/objectives/standard.md) against their float64 oracles in
tests/oracles_standard.py, and the loss contract: padding, reductions, empty inputs, half
precision, fullgraph compilation, options."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from differank.losses import (
    ApproxMetricLoss,
    ApproxNDCGLoss,
    LambdaLoss,
    ListMLELoss,
    MSELoss,
    NeuralNDCGLoss,
    OrdinalLoss,
    Poly1SoftmaxLoss,
    SigmoidBCELoss,
    SoftmaxLoss,
    approx_metric_loss,
    approx_ndcg_loss,
    gumbel_perturbed_scores,
    lambda_loss,
    listmle_loss,
    mse_loss,
    neural_ndcg_loss,
    neural_sort,
    ordinal_loss,
    poly1_softmax_loss,
    sigmoid_bce_loss,
    sinkhorn,
    soft_rank,
    soft_sort,
    softmax_loss,
)
from differank.losses.algorithms.soft_sorting import position_mask
from differank.losses.lambdaloss import WEIGHTINGS
from tests import oracles_standard as oracles

# name -> (function, module class, oracle, options); the options cover every choice
CASES = {
    **{
        f"lambda-{weighting}-k{k}": (
            lambda_loss,
            LambdaLoss,
            oracles.lambda_loss_oracle,
            {"weighting": weighting, "k": k},
        )
        for weighting in WEIGHTINGS
        for k in (None, 3)
    },
    "lambda-natural-sigma2": (
        lambda_loss,
        LambdaLoss,
        oracles.lambda_loss_oracle,
        {"logarithm": "natural", "sigma": 2.0, "mu": 3.0},
    ),
    "approxndcg": (approx_ndcg_loss, ApproxNDCGLoss, oracles.approx_ndcg_oracle, {}),
    "approxndcg-alpha3": (
        approx_ndcg_loss,
        ApproxNDCGLoss,
        oracles.approx_ndcg_oracle,
        {"alpha": 3.0},
    ),
    # a fixed number of Sinkhorn iterations: the oracle's stopping test sums the matrix in
    # another order, which may flip a borderline stop (the tolerance is tested separately)
    **{
        f"neuralndcg-{name}": (
            neural_ndcg_loss,
            NeuralNDCGLoss,
            oracles.neural_ndcg_oracle,
            {"sinkhorn_tolerance": 0.0, "sinkhorn_iterations": 20, **options},
        )
        for name, options in {
            "default": {},
            "k3": {"k": 3},
            "transposed-k3": {"transposed": True, "k": 3},
            "linear": {"powered_relevancies": False, "temperature": 0.5},
            "linear-transposed": {"powered_relevancies": False, "transposed": True},
        }.items()
    },
    "listmle": (listmle_loss, ListMLELoss, oracles.listmle_oracle, {"ties": "index"}),
    "p-listmle": (
        listmle_loss,
        ListMLELoss,
        oracles.listmle_oracle,
        {"ties": "index", "position_aware": True},
    ),
    **{
        f"{name}-eps0": (listmle_loss, ListMLELoss, oracles.listmle_oracle, {**options, "eps": 0.0})
        for name, options in {
            "listmle": {"ties": "index"},
            "p-listmle": {"ties": "index", "position_aware": True},
        }.items()
    },
    "ordinal-n4": (ordinal_loss, OrdinalLoss, oracles.ordinal_oracle, {"n": 4}),
    "softmax": (softmax_loss, SoftmaxLoss, oracles.softmax_oracle, {}),
    "poly1": (poly1_softmax_loss, Poly1SoftmaxLoss, oracles.poly1_softmax_oracle, {}),
    "poly1-eps0.5": (
        poly1_softmax_loss,
        Poly1SoftmaxLoss,
        oracles.poly1_softmax_oracle,
        {"epsilon": 0.5},
    ),
    "bce": (sigmoid_bce_loss, SigmoidBCELoss, oracles.sigmoid_bce_oracle, {}),
    "bce-graded": (
        sigmoid_bce_loss,
        SigmoidBCELoss,
        oracles.sigmoid_bce_oracle,
        {"max_label": 3.0},
    ),
    "mse": (mse_loss, MSELoss, oracles.mse_oracle, {}),
}
# one case per loss for the contract checks
DEFAULTS = ["lambda-ndcgLoss2++-kNone", "approxndcg", "neuralndcg-default", "listmle", "softmax"]
DEFAULTS += ["poly1", "bce", "mse"]


def random_batch(seed=0, batch_size=8, length=7, dtype=torch.float64):
    """Labels 0..3 with ties, real documents scattered among padded slots, query sizes 0..L, an
    all-equal query and a tied-score query; padded slots hold NaN."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch_size, length, generator=g, dtype=dtype)
    labels = torch.randint(0, 4, (batch_size, length), generator=g).to(dtype)
    mask = torch.rand(batch_size, length, generator=g) < 0.75
    mask[0] = True
    mask[1] = False  # an empty query
    mask[2] = torch.arange(length) == 3  # one document
    labels[3] = 2.0  # all labels equal
    mask[4, :3] = True
    scores[4, :3] = 0.5  # tied scores
    labels[4, :2] = torch.tensor([3.0, 0.0], dtype=dtype)
    scores = scores.masked_fill(~mask, float("nan"))
    labels = labels.masked_fill(~mask, float("nan"))
    return scores, labels, mask


def value_and_gradient(function, scores, labels, mask, **options):
    leaf = scores.detach().clone().requires_grad_(True)
    value = function(leaf, labels, mask, **options)
    value.sum().backward()
    return value.detach(), leaf.grad


@pytest.mark.parametrize("name", CASES)
def test_value_and_gradient_match_the_oracle(name):
    function, _, oracle, options = CASES[name]
    for seed in range(2):
        scores, labels, mask = random_batch(seed)
        got_value, got_gradient = value_and_gradient(
            function, scores, labels, mask, reduction="none", **options
        )
        want_value, want_gradient = value_and_gradient(oracle, scores, labels, mask, **options)
        torch.testing.assert_close(got_value, want_value, rtol=1e-9, atol=1e-12)
        # the oracle never reads padding, so its gradient there is 0 (NaN scores included)
        torch.testing.assert_close(got_gradient, want_gradient, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", DEFAULTS)
def test_padding_is_never_read(name):
    function, _, _, options = CASES[name]
    scores, labels, mask = random_batch(1)
    value, gradient = value_and_gradient(function, scores, labels, mask, **options)
    other_scores = scores.masked_fill(~mask, 1e6)
    other_labels = labels.masked_fill(~mask, -7.0)
    other_value, other_gradient = value_and_gradient(
        function, other_scores, other_labels, mask, **options
    )
    assert torch.isfinite(value)
    torch.testing.assert_close(value, other_value, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gradient, other_gradient, rtol=1e-12, atol=1e-12)
    assert (gradient[~mask] == 0).all()


@pytest.mark.parametrize("name", DEFAULTS)
def test_reductions_and_invalid_queries(name):
    function, module, _, options = CASES[name]
    scores, labels, mask = random_batch(2)
    per_query = function(scores, labels, mask, reduction="none", **options)
    assert per_query.shape == (scores.shape[0],)
    assert (per_query[1:4] == 0).all()  # empty, one document, all labels equal
    valid = per_query != 0
    torch.testing.assert_close(
        function(scores, labels, mask, reduction="sum", **options), per_query.sum()
    )
    torch.testing.assert_close(
        function(scores, labels, mask, **options), per_query.sum() / valid.sum()
    )
    torch.testing.assert_close(
        module(**options)(scores, labels, mask), per_query.sum() / valid.sum()
    )


@pytest.mark.parametrize("name", DEFAULTS)
@pytest.mark.parametrize("shape", [(0, 5), (3, 0)])
def test_empty_inputs_give_a_connected_zero(name, shape):
    function, _, _, options = CASES[name]
    scores = torch.zeros(shape, requires_grad=True)
    value = function(scores, torch.zeros(shape), torch.ones(shape, dtype=torch.bool), **options)
    value.backward()
    assert value.item() == 0.0 and scores.grad.shape == shape


@pytest.mark.parametrize("name", DEFAULTS)
def test_bfloat16_is_computed_in_float32(name):
    function, _, _, options = CASES[name]
    scores, labels, mask = random_batch(3, dtype=torch.float32)
    leaf = scores.to(torch.bfloat16).requires_grad_(True)
    value = function(leaf, labels, mask, **options)
    value.backward()
    assert value.dtype == torch.float32 and torch.isfinite(value)
    assert leaf.grad.dtype == torch.bfloat16 and torch.isfinite(leaf.grad).all()
    reference = function(leaf.detach().float(), labels, mask, **options)
    torch.testing.assert_close(value, reference)


@pytest.mark.parametrize("name", DEFAULTS)
def test_nonfinite_score_poisons_only_its_query(name):
    function, _, _, options = CASES[name]
    scores, labels, mask = random_batch(4)
    scores[0, 0] = float("inf")
    value, gradient = value_and_gradient(
        function, scores, labels, mask, reduction="none", **options
    )
    assert value[0].isnan() and value[1:].isfinite().all()
    assert gradient[0, mask[0]].isnan().all() and gradient[1:].isfinite().all()


COMPILED = {
    "lambdaloss": (LambdaLoss, {}),
    "approxndcg": (ApproxNDCGLoss, {}),
    "neuralndcg": (NeuralNDCGLoss, {"sinkhorn_iterations": 3}),  # small graph, same code
    "listmle": (ListMLELoss, {"ties": "index"}),
    "listmle-random": (ListMLELoss, {}),
    "softmax": (SoftmaxLoss, {}),
    "poly1": (Poly1SoftmaxLoss, {}),
    "bce": (SigmoidBCELoss, {}),
    "mse": (MSELoss, {}),
    "approxmetric-map": (ApproxMetricLoss, {"metric": "map", "k": 3}),
}


@pytest.mark.parametrize("name", COMPILED)
def test_compiles_fullgraph_and_matches_eager(name):
    module, options = COMPILED[name]
    loss = module(**options)
    scores, labels, mask = random_batch(5)
    torch.manual_seed(0)  # ListMLE's random ties: aot_eager keeps eager's random stream
    expected = value_and_gradient(loss, scores, labels, mask)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    torch.manual_seed(0)
    got = value_and_gradient(compiled, scores, labels, mask)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


# ---- loss-specific behaviour ----


def test_neural_ndcg_tolerance_stops_each_query_within_it_of_the_oracle():
    scores, labels, mask = random_batch(6)
    got = neural_ndcg_loss(scores, labels, mask, reduction="none")
    want = oracles.neural_ndcg_oracle(scores, labels, mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_neural_ndcg_stochastic_without_noise_is_the_deterministic_loss():
    """NeuralSort is invariant to a shift of a query's scores, and beta = 0 adds no noise."""
    scores, labels, mask = random_batch(7)
    stochastic = neural_ndcg_loss(
        scores, labels, mask, stochastic=True, n_samples=2, beta=0.0, log_scores=False
    )
    torch.testing.assert_close(stochastic, neural_ndcg_loss(scores, labels, mask))


def test_neural_ndcg_stochastic_draws_from_the_global_stream():
    scores, labels, mask = random_batch(8)
    draw = lambda: neural_ndcg_loss(scores, labels, mask, stochastic=True, n_samples=4)  # noqa: E731
    torch.manual_seed(0)
    first = draw()
    torch.manual_seed(0)
    assert torch.equal(first, draw()) and torch.isfinite(first)


def test_listmle_random_ties_give_the_likelihood_of_one_tie_order():
    """With ties="random", each call scores one label-consistent order: its value is the
    oracle's for some relabelling that breaks the ties."""
    scores = torch.randn(1, 5, dtype=torch.float64)
    labels = torch.tensor([[1.0, 1.0, 0.0, 1.0, 2.0]], dtype=torch.float64)
    mask = torch.ones(1, 5, dtype=torch.bool)
    tied = [0, 1, 3]
    candidates = set()
    for permutation in itertools.permutations(range(3)):
        broken = labels.clone()
        for rank, index in zip(permutation, tied, strict=True):
            broken[0, index] = 1.0 + 0.1 * rank
        candidates.add(round(float(oracles.listmle_oracle(scores, broken, mask)[0]), 9))
    seen = {round(float(listmle_loss(scores, labels, mask)), 9) for _ in range(30)}
    assert seen <= candidates and len(seen) > 1


def test_lambda_loss_is_allranks_sum_over_pairs_at_mu_zero_equal_to_ndcg_loss2_weightings():
    scores, labels, mask = random_batch(9)
    plus_plus = lambda_loss(scores, labels, mask, weighting="ndcgLoss2++", mu=0.0)
    torch.testing.assert_close(plus_plus, lambda_loss(scores, labels, mask, weighting="lambdaRank"))


def test_approx_ndcg_tends_to_minus_ndcg_at_large_alpha():
    scores = torch.tensor([[3.0, 1.0, 2.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([[2.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones_like(labels, dtype=torch.bool)
    dcg = 3.0 / 1.0 + 1.0 / torch.log2(torch.tensor(3.0)) + 1.0 / torch.log2(torch.tensor(5.0))
    ideal = 3.0 + 1.0 / torch.log2(torch.tensor(3.0)) + 1.0 / 2.0
    value = approx_ndcg_loss(scores, labels, mask, alpha=100.0)
    torch.testing.assert_close(value, -(dcg / ideal).to(value.dtype))


@pytest.mark.parametrize(
    "build",
    [
        lambda: LambdaLoss(weighting="ndcgLoss3"),
        lambda: LambdaLoss(k=0),
        lambda: LambdaLoss(sigma=0.0),
        lambda: LambdaLoss(logarithm="ten"),
        lambda: ApproxNDCGLoss(alpha=0.0),
        lambda: NeuralNDCGLoss(temperature=-1.0),
        lambda: NeuralNDCGLoss(sinkhorn_iterations=0),
        lambda: ListMLELoss(ties="first"),
        lambda: SigmoidBCELoss(max_label=0.0),
        lambda: SoftmaxLoss(reduction="average"),
        lambda: ApproxMetricLoss(metric="err"),
        lambda: ApproxMetricLoss(temperature=0.0),
    ],
)
def test_bad_options_raise(build):
    with pytest.raises(ValueError):
        build()


@pytest.mark.parametrize("name", COMPILED)
def test_accelerator_path_reads_no_value_on_the_host(name):
    """On the meta device every host read (``.item()``, ``bool(t)``) raises: forward and
    backward run without one (no device synchronisation)."""
    module, options = COMPILED[name]
    scores, labels, mask = (t.to("meta") for t in random_batch(5, dtype=torch.float32))
    scores.requires_grad_(True)
    value = module(**options)(scores, labels, mask)
    value.backward()
    assert value.shape == () and scores.grad.shape == scores.shape


def test_neural_ndcg_gradient_with_early_stopping_passes_gradcheck():
    """Queries freeze at different iterations (the tolerance binds): the written-out Sinkhorn
    backward is still the derivative of what the forward computes."""
    scores, labels, mask = random_batch(10)
    scores = torch.where(mask, scores, 0.0).requires_grad_(True)
    stops = neural_ndcg_loss(scores, labels, mask, reduction="none", sinkhorn_tolerance=1e-3)
    runs = neural_ndcg_loss(scores, labels, mask, reduction="none", sinkhorn_tolerance=0.0)
    assert not torch.equal(stops, runs)  # some query stopped early
    torch.autograd.gradcheck(
        lambda s: neural_ndcg_loss(s, labels, mask, reduction="none", sinkhorn_tolerance=1e-3),
        (scores,),
    )


def test_sinkhorn_stops_when_every_query_converged_only_on_the_cpu_eager_path(monkeypatch):
    """The early exit (a host read) gives what running every iteration frozen gives."""
    scores, labels, mask = random_batch(11)
    options = {"reduction": "none", "sinkhorn_tolerance": 1e-3}
    eager = value_and_gradient(neural_ndcg_loss, scores, labels, mask, **options)
    monkeypatch.setattr(
        "differank.losses.algorithms.soft_sorting.may_read_values", lambda tensor: False
    )
    static = value_and_gradient(neural_ndcg_loss, scores, labels, mask, **options)
    torch.testing.assert_close(eager, static, rtol=0, atol=0)


APPROX_METRIC_CASES = [
    (metric, k) for metric in ("ndcg", "map", "mrr", "precision") for k in (None, 3)
]


@pytest.mark.parametrize(("metric", "k"), APPROX_METRIC_CASES)
def test_approx_metric_matches_its_oracle(metric, k):
    scores, labels, mask = random_batch(12)
    options = {"metric": metric, "k": k, "temperature": 0.7}
    got = value_and_gradient(approx_metric_loss, scores, labels, mask, reduction="none", **options)
    want = value_and_gradient(oracles.approx_metric_oracle, scores, labels, mask, **options)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("metric", ["ndcg", "map", "mrr", "precision"])
def test_approx_metric_tends_to_the_metric_at_low_temperature(metric):
    scores = torch.tensor([[3.0, 1.0, 2.0, 0.0, -1.0]], dtype=torch.float64)
    labels = torch.tensor([[0.0, 2.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    mask = torch.ones_like(labels, dtype=torch.bool)
    # order by score: labels 0, 1, 2, 0, 1 at positions 1..5
    exact = {
        "ndcg": (1 / math.log2(3) + 3 / 2 + 1 / math.log2(6)) / (3 + 1 / math.log2(3) + 1 / 2),
        "map": (1 / 2 + 2 / 3 + 3 / 5) / 3,
        "mrr": 1 / 2,
        "precision": 2 / 3,
    }[metric]
    k = 3 if metric == "precision" else None
    value = approx_metric_loss(scores, labels, mask, metric=metric, k=k, temperature=1e-3)
    torch.testing.assert_close(value, torch.tensor(-exact, dtype=value.dtype))


# ---- differentiable sorting operators ----


def test_sorting_operators_are_row_stochastic_and_tend_to_the_sort():
    scores, _, mask = random_batch(13)
    scores[4, :3] = torch.tensor([0.5, 0.25, 0.0], dtype=scores.dtype)  # no tie for the sort
    rows = position_mask(mask)
    for operator in (neural_sort, soft_sort):
        matrix = operator(scores, mask, temperature=1.0)
        sums = matrix.sum(dim=-1)
        torch.testing.assert_close(sums, rows.to(sums.dtype))
        assert (matrix[~(rows.unsqueeze(-1) & mask.unsqueeze(-2))] == 0).all()
        sharp = operator(scores, mask, temperature=1e-4)
        for b in range(scores.shape[0]):
            real = mask[b].nonzero().flatten()
            order = real[scores[b, real].argsort(descending=True)]
            expected = torch.zeros_like(sharp[b])
            expected[torch.arange(len(order)), order] = 1.0
            torch.testing.assert_close(sharp[b], expected, atol=1e-6, rtol=0)


def test_gumbel_perturbed_scores_are_the_logged_shifted_scores_plus_seeded_noise():
    """Stochastic NeuralSort's input: per query log(s - min + eps) at the real documents (beta
    = 0 leaves exactly that), plus beta·Gumbel noise from the given generator; NaN padding is
    never read, and NeuralSort of every sample is a relaxed sort of the real documents."""
    scores, _, mask = random_batch(15)
    draw = lambda seed, **options: gumbel_perturbed_scores(  # noqa: E731
        scores, mask, n_samples=3, generator=torch.Generator().manual_seed(seed), **options
    )
    samples = draw(0)
    assert samples.shape == (3, *scores.shape) and torch.isfinite(samples[:, mask]).all()
    assert torch.equal(samples, draw(0)) and not torch.equal(samples, draw(1))
    lowest = torch.where(mask, scores, math.inf).amin(dim=-1, keepdim=True)
    expected = torch.log(scores - lowest + 1e-10)
    for sample in draw(0, beta=0.0):
        torch.testing.assert_close(sample[mask], expected[mask], rtol=0, atol=0)
    noise = samples - draw(0, beta=0.0)
    assert noise[:, mask].std() > 0.01  # beta = 0.1 times unit-scale Gumbel draws
    rows = position_mask(mask)
    for sample in samples:
        sums = neural_sort(sample, mask).sum(dim=-1)
        torch.testing.assert_close(sums, rows.to(sums.dtype))


def test_soft_rank_tends_to_the_ranks_and_never_reads_padding():
    scores, _, mask = random_batch(14)
    scores[4, :3] = torch.tensor([0.5, 0.25, 0.0], dtype=scores.dtype)
    ranks = soft_rank(scores, mask, temperature=1e-4)
    for b in range(scores.shape[0]):
        real = mask[b].nonzero().flatten()
        order = scores[b, real].argsort(descending=True)
        expected = torch.empty(len(real), dtype=scores.dtype)
        expected[order] = torch.arange(1, len(real) + 1, dtype=scores.dtype)
        torch.testing.assert_close(ranks[b, real], expected, atol=1e-6, rtol=0)
    assert (ranks[~mask] == 0).all()


def test_sinkhorn_makes_the_real_block_doubly_stochastic():
    scores, _, mask = random_batch(15)
    matrix = sinkhorn(neural_sort(scores, mask), mask, tolerance=1e-10, max_iterations=500)
    rows = position_mask(mask)
    row_sums, column_sums = matrix.sum(dim=-1), matrix.sum(dim=-2)
    torch.testing.assert_close(row_sums, rows.to(row_sums.dtype), atol=1e-8, rtol=0)
    torch.testing.assert_close(column_sums, mask.to(column_sums.dtype), atol=1e-8, rtol=0)


# ---- the allRank benchmark ----


def test_allrank_benchmark_exits_with_a_message_without_allrank(monkeypatch, capsys):
    import allrank_side_by_side  # benchmarks/ is on the path (tests/conftest.py)

    monkeypatch.setattr(allrank_side_by_side, "load_allrank", lambda: None)
    assert allrank_side_by_side.main([]) == 0
    assert "pip install --no-deps allRank==1.4.3" in capsys.readouterr().out


def test_allrank_benchmark_agreement_when_allrank_is_installed():
    import allrank_side_by_side

    allrank = allrank_side_by_side.load_allrank()
    if allrank is None:
        pytest.skip("allRank is not installed (python -m pip install --no-deps allRank==1.4.3)")
    for name, value, gradient, count in allrank_side_by_side.agreement(
        allrank, lengths=(6,), seeds=(0,)
    ):
        limit = 1e-4 if name.startswith("neuralNDCG") else 1e-5
        assert count > 0 and value <= limit and gradient <= limit, name

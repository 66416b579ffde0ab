"""LETOR-4.0-exact metrics (docs/metrics.md#the-letor-script-rules): hand-computed goldens per rule,
the loop-by-loop oracle on
random tied/short/padded queries, padding invariance, conventions, errors, and the torchmetrics
wrapper."""

from __future__ import annotations

import math

import pytest
import torch

from differank.rankers.metrics.letor import LetorMetric, letor_metrics, letor_ranking, metric_keys
from tests.oracles import letor_query_metrics_oracle, trec_query_metrics_oracle

NAN = float("nan")
D3 = 1.0 / math.log2(3.0)  # LETOR discount at rank 3 = log(2)/log(3) = 0.6309297535714574


def one(scores, labels, **kwargs):
    """Metrics of a single unpadded query as plain floats."""
    s = torch.tensor([scores], dtype=torch.float64)
    y = torch.tensor([labels], dtype=torch.float64)
    out = letor_metrics(s, y, torch.ones_like(s, dtype=torch.bool), **kwargs)
    return {key: value.item() for key, value in out.items()}


def pack(queries, *, extra=0, generator=None, pad_value=NAN):
    """Pad queries [(scores, labels), ...] into [B, L] tensors. With a generator the real
    documents sit at random sorted slots (interleaved padding, list order kept)."""
    length = max(len(s) for s, _ in queries) + extra
    scores = torch.full((len(queries), length), pad_value, dtype=torch.float64)
    labels = torch.full((len(queries), length), NAN, dtype=torch.float64)
    mask = torch.zeros(len(queries), length, dtype=torch.bool)
    for b, (s, y) in enumerate(queries):
        if generator is None:
            slots = torch.arange(len(s))
        else:
            slots = torch.randperm(length, generator=generator)[: len(s)].sort().values
        scores[b, slots] = torch.tensor(s, dtype=torch.float64)
        labels[b, slots] = torch.tensor(y, dtype=torch.float64)
        mask[b, slots] = True
    return scores, labels, mask


def random_queries(count, seed, *, max_n=30, levels=3):
    """Queries with many score ties (scores on a coarse grid), short lists (n < 10), queries
    without relevant documents, and some label scales beyond LETOR's 0..2."""
    g = torch.Generator().manual_seed(seed)
    queries = []
    for i in range(count):
        n = int(torch.randint(1, 10 if i % 2 else max_n + 1, (1,), generator=g))
        grid = int(torch.randint(1, 6, (1,), generator=g))  # 1..5 distinct score values
        scores = (torch.randint(0, grid, (n,), generator=g) / 2.0 - 1.0).tolist()
        top = 1 if i % 7 == 0 else levels if i % 5 else 5
        labels = torch.randint(0, top, (n,), generator=g).tolist()
        if i % 11 == 0:
            labels = [0] * n
        if i % 13 == 0:
            scores = torch.randn(n, generator=g, dtype=torch.float64).tolist()  # no ties
        queries.append((scores, labels))
    return queries


# ---------------------------------------------------------------------------------------------
# Hand-computed goldens, one per rule of docs/metrics.md#the-letor-script-rules
# ---------------------------------------------------------------------------------------------

# Query A (file order): scores [0.5, 0.9, 0.5, 0.1], labels [2, 0, 1, 1].
# Stable descending sort: doc1 (0.9), doc0 (0.5), doc2 (0.5, tie -> after doc0), doc3 (0.1)
#   ranked labels [0, 2, 1, 1], gains 2^l - 1 = [0, 3, 1, 1]
#   LETOR discounts D(1..4) = [1, 1, 1/log2 3, 1/log2 4 = 1/2]
#   DCG@1..4  = [0, 3, 3 + D3, 3.5 + D3]
#   ideal labels [2, 1, 1, 0], gains [3, 1, 1, 0] -> IDCG@1..4 = [3, 4, 4 + D3, 4 + D3]
#   NDCG@1..4 = [0, 3/4, (3 + D3)/(4 + D3), (3.5 + D3)/(4 + D3)] = [0, .75, .78406, .89203]
#   relevant ranks (label > 0): 2, 3, 4 -> AP = (1/2 + 2/3 + 3/4) / 3 = 0.638888...
QA = ([0.5, 0.9, 0.5, 0.1], [2, 0, 1, 1])
QA_NDCG = [0.0, 0.75, (3 + D3) / (4 + D3), (3.5 + D3) / (4 + D3)]


def test_golden_query_a_all_keys():
    m = one(*QA, ks=(1, 2, 3, 4, 5, 10))
    assert m["ndcg@1"] == 0.0
    assert m["ndcg@2"] == pytest.approx(0.75, abs=1e-15)
    assert m["ndcg@3"] == pytest.approx(QA_NDCG[2], abs=1e-15)
    assert m["ndcg@4"] == pytest.approx(QA_NDCG[3], abs=1e-15)
    assert m["ndcg@5"] == 0.0 and m["ndcg@10"] == 0.0  # k > n = 4: the script's undef -> 0
    assert m["mean_ndcg"] == pytest.approx(sum(QA_NDCG) / 4, abs=1e-15)  # = 0.606523
    assert m["map"] == pytest.approx((1 / 2 + 2 / 3 + 3 / 4) / 3, abs=1e-15)  # = 0.638889
    # ranked relevance [0, 1, 1, 1]: P@1 = 0, P@2 = 1/2, P@3 = 2/3, P@4 = 3/4,
    # P@5 = 3/5 and P@10 = 3/10 (holes are irrelevant, division by k)
    expected_p = {1: 0.0, 2: 1 / 2, 3: 2 / 3, 4: 3 / 4, 5: 3 / 5, 10: 3 / 10}
    for k, value in expected_p.items():
        assert m[f"p@{k}"] == pytest.approx(value, abs=1e-15)
    assert list(m) == metric_keys((1, 2, 3, 4, 5, 10))


def test_ties_keep_list_order():
    # Same scores, docs 0 and 2 swapped in the file: labels [1, 0, 2, 1].
    # Ranked: doc1 (0.9, l=0), doc0 (0.5, l=1), doc2 (0.5, l=2), doc3 -> labels [0, 1, 2, 1]
    # DCG@2 = 0 + 1 = 1, IDCG@2 = 3 + 1 = 4 -> NDCG@2 = 1/4 (query A, same scores: 3/4).
    m = one([0.5, 0.9, 0.5, 0.1], [1, 0, 2, 1], ks=(2,))
    assert m["ndcg@2"] == pytest.approx(0.25, abs=1e-15)
    # All scores tied: the ranking is the file order.
    # labels [0, 2] -> ranked gains [0, 3]: NDCG@1 = 0/3 = 0, NDCG@2 = 3/3 = 1, AP = (1/2)/1
    m = one([1.0, 1.0], [0, 2], ks=(1, 2))
    assert (m["ndcg@1"], m["ndcg@2"], m["map"]) == (0.0, 1.0, 0.5)
    order = letor_ranking(torch.tensor([[1.0, 3.0, 1.0, 3.0, 2.0]]), torch.ones(1, 5, dtype=bool))
    assert order.tolist() == [[1, 3, 4, 0, 2]]
    # -0.0 and 0.0 compare equal (perl <=>): file order decides
    order = letor_ranking(torch.tensor([[-0.0, 0.0, -0.0]]), torch.ones(1, 3, dtype=bool))
    assert order.tolist() == [[0, 1, 2]]


def test_gain_is_two_to_the_label_minus_one():
    # scores rank labels [1, 2]: gains [1, 3]; ideal [3, 1].
    # NDCG@1 = 1/3 (a linear gain would give 1/2); NDCG@2 = (1 + 3)/(3 + 1) = 1
    m = one([2.0, 1.0], [1, 2], ks=(1, 2))
    assert m["ndcg@1"] == pytest.approx(1 / 3, abs=1e-15)
    assert m["ndcg@2"] == 1.0
    # label 3 (MSLR-style grades): gain 7; ranked [1, 3] -> NDCG@1 = 1/7
    assert one([2.0, 1.0], [1, 3], ks=(1,))["ndcg@1"] == pytest.approx(1 / 7, abs=1e-15)


def test_letor_discount_at_ranks_1_2_3_4():
    # One relevant document (gain 1) at rank p, IDCG = 1 at every k:
    # LETOR: D(1) = D(2) = 1, D(3) = 1/log2 3, D(4) = 1/log2 4 = 1/2
    # trec:  D(p) = 1/log2(1 + p): D(1) = 1, D(2) = 1/log2 3, D(3) = 1/2, D(4) = 1/log2 5
    letor = {1: 1.0, 2: 1.0, 3: D3, 4: 0.5}
    trec = {1: 1.0, 2: D3, 3: 0.5, 4: 1 / math.log2(5)}
    for p in (1, 2, 3, 4):
        scores = [float(-i) for i in range(4)]  # ranking = file order
        labels = [1 if i == p - 1 else 0 for i in range(4)]
        assert one(scores, labels, ks=(4,))["ndcg@4"] == pytest.approx(letor[p], abs=1e-15)
        got = one(scores, labels, ks=(4,), convention="trec")["ndcg@4"]
        assert got == pytest.approx(trec[p], abs=1e-15)


def test_query_without_relevant_documents_counts_as_zero():
    m = one([0.3, 0.2, 0.1], [0, 0, 0])
    assert all(value == 0.0 for value in m.values())
    # and it is averaged in: the mean over [A, no-relevant] is half of A's value
    scores, labels, mask = pack([QA, ([0.3, 0.2, 0.1], [0, 0, 0])])
    out = letor_metrics(scores, labels, mask, ks=(2,))
    assert out["ndcg@2"].mean().item() == pytest.approx(0.75 / 2, abs=1e-15)
    assert out["map"].mean().item() == pytest.approx((1 / 2 + 2 / 3 + 3 / 4) / 3 / 2, abs=1e-15)


def test_short_lists_letor_zero_vs_ndcg_at_n_vs_trec():
    # n = 1, label 1: NDCG@1 = 1; for k = 3, 10 > n: letor 0 (quirk), ndcg_at_n / trec NDCG@1 = 1
    # P@3 = 1/3, P@10 = 1/10; AP = 1; MeanNDCG = NDCG@1 = 1
    m = one([0.0], [1], ks=(1, 3, 10))
    assert (m["ndcg@1"], m["ndcg@3"], m["ndcg@10"]) == (1.0, 0.0, 0.0)
    assert (m["map"], m["mean_ndcg"]) == (1.0, 1.0)
    assert m["p@3"] == pytest.approx(1 / 3, abs=1e-15) and m["p@10"] == pytest.approx(0.1)
    intended = one([0.0], [1], ks=(1, 3, 10), short_list="ndcg_at_n")
    assert (intended["ndcg@3"], intended["ndcg@10"]) == (1.0, 1.0)
    trec = one([0.0], [1], ks=(1, 3, 10), convention="trec")
    assert (trec["ndcg@3"], trec["ndcg@10"]) == (1.0, 1.0)
    # query A under ndcg_at_n: NDCG@5 = NDCG@10 = NDCG@4 = (3.5 + D3)/(4 + D3)
    a = one(*QA, ks=(4, 5, 10), short_list="ndcg_at_n")
    assert a["ndcg@5"] == a["ndcg@10"] == a["ndcg@4"] == pytest.approx(QA_NDCG[3], abs=1e-15)
    assert a["mean_ndcg"] == one(*QA)["mean_ndcg"]  # MeanNDCG only uses positions 1..n


def test_trec_convention_golden():
    # Query A under trec: ranked gains [0, 3, 1, 1], ideal [3, 1, 1, 0],
    # D = [1, 1/log2 3, 1/2, 1/log2 5]
    # DCG@2 = 3 D3; IDCG@2 = 3 + D3 -> NDCG@2 = 3 D3 / (3 + D3) = 0.521296
    # DCG@4 = 3 D3 + 1/2 + 1/log2 5; IDCG@4 = 3 + D3 + 1/2
    m = one(*QA, ks=(2, 4, 10), convention="trec")
    d5 = 1 / math.log2(5)
    assert m["ndcg@2"] == pytest.approx(3 * D3 / (3 + D3), abs=1e-15)
    ndcg4 = (3 * D3 + 0.5 + d5) / (3.5 + D3)
    assert m["ndcg@4"] == pytest.approx(ndcg4, abs=1e-15)
    assert m["ndcg@10"] == pytest.approx(ndcg4, abs=1e-15)
    ndcg3 = (3 * D3 + 0.5) / (3.5 + D3)
    assert m["mean_ndcg"] == pytest.approx((0 + m["ndcg@2"] + ndcg3 + ndcg4) / 4, abs=1e-15)
    assert m["map"] == pytest.approx(one(*QA)["map"], abs=0)  # AP and P@k do not change


def test_precision_divides_by_k_and_counts_label_above_zero():
    # ranked labels [2, 0, 1]: relevant = label > 0 -> P@1 = 1, P@2 = 1/2, P@3 = 2/3, P@10 = 2/10
    m = one([3.0, 2.0, 1.0], [2, 0, 1], ks=(1, 2, 3, 10))
    expected = {1: 1.0, 2: 0.5, 3: 2 / 3, 10: 0.2}
    for k, value in expected.items():
        assert m[f"p@{k}"] == pytest.approx(value, abs=1e-15)


def test_average_precision_formula():
    # ranked labels [1, 0, 2, 0, 1]: relevant at ranks 1, 3, 5 (R = 3)
    # AP = (1/1 + 2/3 + 3/5) / 3 = 2.2666.../3 = 0.755555...
    m = one([5.0, 4.0, 3.0, 2.0, 1.0], [1, 0, 2, 0, 1])
    assert m["map"] == pytest.approx((1 + 2 / 3 + 3 / 5) / 3, abs=1e-15)


def test_mean_ndcg_averages_over_the_whole_list():
    # n = 12, the only relevant document (label 1) ranked last: IDCG@k = 1 for every k,
    # DCG@k = 0 for k < 12 and DCG@12 = 1/log2 12 -> MeanNDCG = (1/log2 12) / 12 = 0.023247,
    # although NDCG@1..10 are all 0.
    scores = [float(12 - i) for i in range(12)]
    m = one(scores, [0] * 11 + [1], ks=(10,))
    assert m["ndcg@10"] == 0.0
    assert m["mean_ndcg"] == pytest.approx(1 / math.log2(12) / 12, abs=1e-15)
    # and in general it equals the mean of NDCG@1..NDCG@n
    queries = random_queries(20, seed=5, max_n=25)
    s, y, mask = pack(queries)
    every = letor_metrics(s, y, mask, ks=tuple(range(1, s.shape[1] + 1)))
    n = mask.sum(1)
    for b in range(len(queries)):
        values = [every[f"ndcg@{k}"][b].item() for k in range(1, int(n[b]) + 1)]
        assert every["mean_ndcg"][b].item() == pytest.approx(sum(values) / len(values), abs=1e-14)


# ---------------------------------------------------------------------------------------------
# The loop-by-loop oracle (Eval-Score-4.0.pl's loops) on random queries
# ---------------------------------------------------------------------------------------------

KS = (1, 2, 3, 5, 10, 12)


@pytest.mark.parametrize(
    ("convention", "short_list"), [("letor", None), ("letor", "ndcg_at_n"), ("trec", None)]
)
def test_batched_equals_oracle_on_random_queries(convention, short_list):
    queries = random_queries(360, seed=0)
    g = torch.Generator().manual_seed(1)
    scores, labels, mask = pack(queries, extra=3, generator=g)  # interleaved NaN padding
    out = letor_metrics(scores, labels, mask, ks=KS, convention=convention, short_list=short_list)
    assert all(v.dtype == torch.float64 and v.shape == (len(queries),) for v in out.values())
    for b, (s, y) in enumerate(queries):
        if convention == "trec":
            expected = trec_query_metrics_oracle(s, y, KS)
        else:
            expected = letor_query_metrics_oracle(s, y, KS, short_list=short_list or "zero")
        for key, value in expected.items():
            assert out[key][b].item() == pytest.approx(value, abs=1e-12), (b, key)


def test_dataset_means_match_oracle_means():
    queries = random_queries(300, seed=3)
    out = letor_metrics(*pack(queries))
    oracle = [letor_query_metrics_oracle(s, y) for s, y in queries]
    for key in out:
        expected = sum(q[key] for q in oracle) / len(oracle)
        assert out[key].mean().item() == pytest.approx(expected, abs=1e-12)


def test_large_lists_against_oracle():
    g = torch.Generator().manual_seed(7)
    queries = []
    for n in (2000, 1500, 37):
        scores = (torch.randint(0, 50, (n,), generator=g) / 7.0).tolist()  # heavy ties
        labels = torch.randint(0, 3, (n,), generator=g).tolist()
        queries.append((scores, labels))
    out = letor_metrics(*pack(queries), ks=(1, 10, 100, 1000, 1600))
    for b, (s, y) in enumerate(queries):
        expected = letor_query_metrics_oracle(s, y, (1, 10, 100, 1000, 1600))
        for key, value in expected.items():
            assert out[key][b].item() == pytest.approx(value, abs=1e-12), (b, key)


def test_infinite_scores_rank_like_the_oracle():
    queries = [([math.inf, 0.0, -math.inf, math.inf, 1.0], [0, 1, 2, 1, 0])]
    out = letor_metrics(*pack(queries, extra=2, pad_value=math.inf))
    expected = letor_query_metrics_oracle(*queries[0])
    for key, value in expected.items():
        assert out[key].item() == pytest.approx(value, abs=1e-15)


# ---------------------------------------------------------------------------------------------
# Padding, layout, dtypes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pad_value", [NAN, math.inf, -math.inf, 0.0, 1e9])
def test_padding_changes_nothing(pad_value):
    queries = random_queries(40, seed=11)
    reference = letor_metrics(*pack(queries))
    g = torch.Generator().manual_seed(12)
    for extra in (0, 5, 40):
        scores, labels, mask = pack(queries, extra=extra, generator=g, pad_value=pad_value)
        labels = torch.where(mask, labels, torch.full_like(labels, pad_value))
        out = letor_metrics(scores, labels, mask)
        for key in reference:
            # running sums over positions: padding appends exact zeros -> bitwise equal
            assert torch.equal(out[key], reference[key]), key


def test_padded_slots_go_last_whatever_their_score():
    scores = torch.tensor([[math.inf, 0.2, 5.0, 0.1, math.inf]])
    mask = torch.tensor([[False, True, False, True, False]])
    assert letor_ranking(scores, mask).tolist() == [[1, 3, 0, 2, 4]]


def test_empty_rows_and_empty_lists_give_zero():
    scores = torch.tensor([[NAN, NAN], [1.0, 2.0]])
    labels = torch.tensor([[NAN, NAN], [1.0, 0.0]])
    mask = torch.tensor([[False, False], [True, True]])
    out = letor_metrics(scores, labels, mask)
    assert all(v[0].item() == 0.0 for v in out.values())
    empty = letor_metrics(torch.zeros(3, 0), torch.zeros(3, 0), torch.zeros(3, 0, dtype=bool))
    assert all(v.shape == (3,) and not v.any() for v in empty.values())


def test_dtypes_inputs_untouched_and_no_graph():
    scores32 = torch.tensor([[0.5, 0.9, 0.5, 0.1]], dtype=torch.float32, requires_grad=True)
    labels_int = torch.tensor([[2, 0, 1, 1]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    before = scores32.detach().clone()
    out = letor_metrics(scores32, labels_int, mask)
    assert torch.equal(scores32.detach(), before)
    assert all(not v.requires_grad and v.dtype == torch.float64 for v in out.values())
    for key, value in one(*QA).items():
        assert out[key].item() == value


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_equals_cpu():
    scores, labels, mask = pack(random_queries(100, seed=9), extra=4)
    cpu = letor_metrics(scores, labels, mask, ks=KS)
    gpu = letor_metrics(scores.cuda(), labels.cuda(), mask.cuda(), ks=KS)
    for key, value in cpu.items():
        assert gpu[key].device.type == "cuda"
        torch.testing.assert_close(gpu[key].cpu(), value, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_clear_errors():
    s = torch.zeros(2, 3)
    y = torch.zeros(2, 3)
    m = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"scores must be \[B, L\]"):
        letor_metrics(torch.zeros(2, 3, 4), y, m)
    with pytest.raises(ValueError, match="labels must match"):
        letor_metrics(s, torch.zeros(2, 4), m)
    with pytest.raises(ValueError, match="mask must match"):
        letor_metrics(s, y, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be bool"):
        letor_metrics(s, y, m.float())
    with pytest.raises(ValueError, match="floating point"):
        letor_metrics(torch.zeros(2, 3, dtype=torch.long), y, m)
    with pytest.raises(ValueError, match="scores contain NaN"):
        letor_metrics(torch.tensor([[0.0, NAN, 1.0]]), y[:1], m[:1])
    with pytest.raises(ValueError, match="labels must be non-negative"):
        letor_metrics(s[:1], torch.tensor([[0.0, -1.0, 1.0]]), m[:1])
    with pytest.raises(ValueError, match="labels must be non-negative"):
        letor_metrics(s[:1], torch.tensor([[0.0, NAN, 1.0]]), m[:1])
    with pytest.raises(ValueError, match="convention"):
        letor_metrics(s, y, m, convention="ndcg")
    with pytest.raises(ValueError, match="short_list"):
        letor_metrics(s, y, m, short_list="nan")
    with pytest.raises(ValueError, match="mix|quirk"):
        letor_metrics(s, y, m, convention="trec", short_list="zero")
    for bad in ((0,), (1, 1), (2.0,), 5):
        with pytest.raises(ValueError, match="ks"):
            letor_metrics(s, y, m, ks=bad)


# ---------------------------------------------------------------------------------------------
# The torchmetrics wrapper (beside letor_metrics in rankers/metrics/letor.py)
# ---------------------------------------------------------------------------------------------


def test_letor_metric_batch_by_batch_equals_one_call():
    queries = random_queries(70, seed=21)
    scores, labels, mask = pack(queries, extra=2, generator=torch.Generator().manual_seed(2))
    whole = letor_metrics(scores, labels, mask, ks=(1, 3, 10))
    metric = LetorMetric(ks=(1, 3, 10))
    for start in range(0, len(queries), 16):
        rows = slice(start, start + 16)
        metric.update(scores[rows].float(), labels[rows], mask[rows])
    got = metric.compute()
    assert list(got) == metric_keys((1, 3, 10))
    for key, value in whole.items():
        assert got[key].item() == pytest.approx(value.mean().item(), abs=1e-12), key
    metric.reset()
    metric.update(scores, labels, mask)
    assert metric.compute()["map"].item() == pytest.approx(whole["map"].mean().item(), abs=1e-12)


def test_letor_metric_ignores_empty_rows_and_validates_options():
    metric = LetorMetric(ks=(1,), convention="trec")
    scores = torch.tensor([[NAN, NAN], [1.0, 2.0]])
    labels = torch.tensor([[NAN, NAN], [1.0, 0.0]])
    metric.update(scores, labels, torch.tensor([[False, False], [True, True]]))
    # only the real query counts: ranked labels [0, 1] -> AP = 1/2, P@1 = 0
    assert metric.compute()["map"].item() == 0.5
    with pytest.raises(ValueError, match="convention"):
        LetorMetric(convention="bad")


# ---------------------------------------------------------------------------------------------
# Conventions for queries without a relevant document (docs/metrics.md#conventions)
# ---------------------------------------------------------------------------------------------

RANKING_KEYS = ("map", "mean_ndcg", *(f"ndcg@{k}" for k in KS))


def test_no_relevant_as_1_is_trec_with_1_for_queries_without_a_relevant_document():
    queries = random_queries(200, seed=5)
    scores, labels, mask = pack(queries, extra=2, generator=torch.Generator().manual_seed(4))
    out = letor_metrics(scores, labels, mask, ks=KS, convention="no_relevant_as_1")
    assert sum(max(y) == 0 for _, y in queries) > 10
    for b, (s, y) in enumerate(queries):
        expected = trec_query_metrics_oracle(s, y, KS)
        if max(y) == 0:  # nothing to find: a perfect ranking (allRank, LightGBM)
            expected.update(dict.fromkeys(RANKING_KEYS, 1.0))
        for key, value in expected.items():
            assert out[key][b].item() == pytest.approx(value, abs=1e-12), (b, key)


def test_no_relevant_dropped_averages_only_queries_with_a_relevant_document():
    queries = random_queries(90, seed=6)
    scores, labels, mask = pack(queries, extra=1)
    metric = LetorMetric(ks=KS, convention="no_relevant_dropped")
    for start in range(0, len(queries), 32):
        rows = slice(start, start + 32)
        metric.update(scores[rows], labels[rows], mask[rows])
    kept = [trec_query_metrics_oracle(s, y, KS) for s, y in queries if max(y) > 0]
    assert 0 < len(kept) < len(queries) and int(metric.queries) == len(kept)
    for key, value in metric.compute().items():
        expected = sum(q[key] for q in kept) / len(kept)
        assert value.item() == pytest.approx(expected, abs=1e-12), key


@pytest.mark.parametrize("convention", ["no_relevant_as_1", "no_relevant_dropped"])
def test_conventions_other_than_letor_refuse_the_scripts_short_list_rule(convention):
    with pytest.raises(ValueError, match="quirk"):
        letor_metrics(*pack([([1.0], [1])]), convention=convention, short_list="zero")

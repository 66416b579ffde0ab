"""ConvexLoss time per batch: the sampler and set-LSE beside the baseline they replaced, in one run.

    python benchmarks/convex_throughput.py [--batch 64] [--lengths 16 64 128] [--samples 100 1000]
        [--deltas auc ndcg map] [--repeats 5] [--threads 1] [--device cpu] [--epoch-fold 1]
        [--out benchmarks/results/convex_throughput.md]

"old" is the implementation before the sampler rewrite, kept verbatim in this file (section
"Baseline") only so that both can be timed in the same process: a sampler that kept every chain
in position order (documents, scores, labels and coefficients per position, O(L) masked updates
per step over a dozen [B, C, L] tensors), built three restart candidates per chain with an
argsort each and recomputed their Δ and coefficients with per-level prefix counts, stored int64
orders and float coefficients per step and scattered them to slot order at the end; the loss
took c(y)·s as a batched matrix-vector product. "new" is
``differank.losses.algorithms.permutation_sampler.run_sampler`` and
``differank.losses.convex.convex_loss`` as shipped: the same chains, proposals, acceptance rule,
restart distribution and deduplication (see their docstrings for how the work is cut).

Prints markdown tables of median seconds per batch (process CPU time on CPU with ``--threads``
threads, so a shared machine does not inflate it; wall time on CUDA), old and new measured
alternately in the same process, and their ratio: the sampler alone (S orders per query with
their Δ, coefficients and hashes), the set-LSE given those samples (deduplication, c·s,
log-sum-exp, forward and backward), and ``convex_loss`` end to end (forward + backward, what a
training step pays). Labels are uniform on {0, 1, 2} (LETOR 4.0 grades), scores standard normal,
every slot real. Other options are the defaults (restart skew -20, T = 10, Metropolis). With
``--epoch-fold N`` it also times one training epoch over MQ2008 fold N (real batches, Adam on a
linear scorer) per setting, old and new.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import measure
import torch

from differank.losses.algorithms.pairs import sample_pairs, valid_queries
from differank.losses.algorithms.permutation_sampler import (
    ACCEPTS,
    TARGETS,
    QueryTables,
    SampleSet,
    _gather,
    _hash_coefficients,
    _map_delta,
    _real_positions,
    first_occurrences,
    order_deltas,
    order_hashes,
    position_counts,
    query_tables,
    run_sampler,
)
from differank.losses.convex import convex_loss, set_log_sum_exp
from differank.losses.inputs import check_list_inputs
from differank.losses.reduction import reduce_queries

# ---------------------------------------------------------------------------------------------
# Baseline: losses/algorithms/permutation_sampler.py's run_sampler (with _seed_orders, _swap,
# _restart, _repeat, _swapped_delta) and losses/convex.py's set_log_sum_exp as they were before the
# rewrite, copied unchanged but for the names. Used only for timing here; not part of the library.
# ---------------------------------------------------------------------------------------------


def _baseline_seed_orders(
    tables: QueryTables, chains: int, generator: torch.Generator | None
) -> torch.Tensor:
    """``[3, B, C, L]`` restart candidates: ideal (random order within a label, Δ = 0), a uniform
    shuffle (E[Δ_AUC] = 1/2) and the reversed ideal (Δ_AUC = 1), padding after in slot order."""
    batch, length = tables.levels.shape
    noise = torch.rand(batch, chains, length, generator=generator, device=tables.levels.device)
    levels = tables.levels.unsqueeze(1).to(noise.dtype)
    keys = torch.stack([-(levels + noise), noise, levels + noise])
    keys = torch.where(tables.mask.unsqueeze(1), keys, torch.full_like(keys, math.inf))
    return keys.argsort(dim=-1, stable=True)


@torch.no_grad()
def baseline_run_sampler(
    scores: torch.Tensor,
    tables: QueryTables,
    *,
    num_samples: int = 1000,
    restart_skew: float = -20.0,
    walk_length: int = 10,
    num_chains: int | None = None,
    accept: str = "metropolis",
    target: str = "convex",
    generator: torch.Generator | None = None,
) -> SampleSet:
    """Draw ``num_samples`` orders per query by restarted swap-Metropolis walks.

    C chains per query (default ``ceil(S / T)``, i.e. one walk each) run in lock-step. Every
    ``walk_length`` (T) steps each chain restarts from one of three seeds (ideal with random
    within-label order, uniform shuffle, reversed ideal) drawn with probability
    ``∝ exp(restart_skew · Δ(seed))``. A step proposes swapping the positions of a uniform
    preference pair (two documents with different labels; their number is state-independent,
    so the proposal is symmetric) and accepts it with probability ``min(1, exp(E' - E))`` on the
    detached scores (``accept="all"``: always), where ``E = Δ + c·s`` (``target="convex"``) or
    ``E = c·s`` (``target="model"``: the model distribution Pr(y|x; w) of MLE and ExpGain).
    The state after every step is collected.

    Everything a sample needs later (Δ, the coefficients c, the hash) is updated incrementally
    in O(L) per step instead of recomputed per sample: when u moves from above v to below v and
    their labels differ, c·s changes by (2/|P|)(s_v - s_u), c_u by -2/|P| and c_v by +2/|P|.

    Shape:
        scores: [B, L] (padding already replaced by finite values). Memory O(B·S·L).
    """
    if accept not in ACCEPTS or target not in TARGETS:
        raise ValueError(f"accept must be in {ACCEPTS} and target in {TARGETS}, got "
                         f"{accept!r} and {target!r}")  # fmt: skip
    batch, length = scores.shape
    device, dtype = scores.device, scores.dtype
    chains = num_chains if num_chains is not None else -(-num_samples // walk_length)
    steps = -(-num_samples // (chains * walk_length)) * walk_length
    first, second, _ = sample_pairs(
        tables.levels.to(dtype), tables.mask, steps * chains, generator=generator
    )
    first, second = first.view(batch, steps, chains), second.view(batch, steps, chains)
    log_uniform = torch.rand(steps, batch, chains, generator=generator, device=device).log()
    scale = (2.0 / tables.pairs).to(dtype)[:, None, None]  # [B, 1, 1]
    positions = torch.arange(length, device=device)
    weights = _hash_coefficients(length, device)
    orders = torch.empty(batch, chains, steps, length, dtype=torch.long, device=device)
    coefficients = torch.empty(batch, chains, steps, length, dtype=dtype, device=device)
    deltas = torch.empty(batch, chains, steps, dtype=dtype, device=device)
    hashes = torch.empty(batch, chains, steps, dtype=torch.long, device=device)
    zero = torch.zeros((), dtype=dtype, device=device)
    for step in range(steps):
        if step % walk_length == 0:
            state = _baseline_restart(scores, tables, chains, restart_skew, generator)
            order, pos, score_at, level_at, coef_at, delta_now, hash_now = state
        i, j = first[:, step, :, None], second[:, step, :, None]  # [B, C, 1] documents to swap
        pi, pj = pos.gather(-1, i), pos.gather(-1, j)
        p, q = torch.minimum(pi, pj), torch.maximum(pi, pj)  # [B, C, 1], p <= q
        a, b = order.gather(-1, p), order.gather(-1, q)  # upper and lower document
        sa, sb = score_at.gather(-1, p), score_at.gather(-1, q)
        la, lb = level_at.gather(-1, p), level_at.gather(-1, q)
        window = (positions > p) & (positions < q)  # [B, C, L]
        cross_a, cross_b = window & (level_at != la), window & (level_at != lb)
        over_a = torch.where(cross_a, score_at - sa, zero)  # a passes below these
        over_b = torch.where(cross_b, sb - score_at, zero)  # b passes above these
        change = scale[..., 0] * ((sb - sa).squeeze(-1) + (over_a + over_b).sum(-1))
        new_delta = _baseline_swapped_delta(
            tables, order, a, b, p, q, la, lb, level_at, window, delta_now
        )
        if target == "convex":
            change = change + (new_delta - delta_now)
        accepted = (p != q).squeeze(-1)  # p == q only in queries without a pair
        if accept == "metropolis":
            accepted = accepted & (log_uniform[step] < change)
        flag = accepted[..., None]
        step_scale = torch.where(flag, scale, zero)  # [B, C, 1]: 0 where rejected
        coef_a, coef_b = coef_at.gather(-1, p), coef_at.gather(-1, q)
        count_a = cross_a.sum(-1, keepdim=True).to(dtype) + 1
        count_b = cross_b.sum(-1, keepdim=True).to(dtype) + 1
        coef_at += step_scale * (cross_a.to(dtype) - cross_b.to(dtype))
        _baseline_swap(
            coef_at, p, q, flag, coef_a - step_scale * count_a, coef_b + step_scale * count_b
        )
        _baseline_swap(order, p, q, flag, a, b)
        _baseline_swap(score_at, p, q, flag, sa, sb)
        _baseline_swap(level_at, p, q, flag, la, lb)
        pos.scatter_(-1, a, torch.where(flag, q, p))
        pos.scatter_(-1, b, torch.where(flag, p, q))
        delta_now = torch.where(accepted, new_delta, delta_now)
        rehash = (b - a).squeeze(-1) * (weights[p] - weights[q]).squeeze(-1)
        hash_now = hash_now + torch.where(accepted, rehash, torch.zeros_like(rehash))
        orders[:, :, step], coefficients[:, :, step] = order, coef_at
        deltas[:, :, step], hashes[:, :, step] = delta_now, hash_now
    orders = orders.view(batch, chains * steps, length)[:, :num_samples]
    coefficients = coefficients.view(batch, chains * steps, length)[:, :num_samples]
    by_slot = torch.zeros_like(coefficients).scatter_(-1, orders, coefficients)
    return SampleSet(
        orders,
        deltas.view(batch, -1)[:, :num_samples],
        by_slot,
        hashes.view(batch, -1)[:, :num_samples],
    )


def _baseline_swap(
    values: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    flag: torch.Tensor,
    at_p: torch.Tensor,
    at_q: torch.Tensor,
) -> None:
    """In place, where ``flag``: ``at_p`` (what leaves position p) goes to q and ``at_q`` to p;
    elsewhere both positions keep their values."""
    values.scatter_(-1, p, torch.where(flag, at_q, values.gather(-1, p)))
    values.scatter_(-1, q, torch.where(flag, at_p, values.gather(-1, q)))


def _baseline_restart(
    scores: torch.Tensor,
    tables: QueryTables,
    chains: int,
    restart_skew: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, ...]:
    """Fresh chain states from the three seeds, chosen ∝ exp(restart_skew · Δ(seed))."""
    batch, length = scores.shape
    candidates = _baseline_seed_orders(tables, chains, generator)  # [3, B, C, L]
    deltas = order_deltas(candidates.view(3 * batch, chains, length), _baseline_repeat(tables, 3))
    deltas = deltas.view(3, batch, chains)
    uniform = torch.rand(3, batch, chains, generator=generator, device=scores.device)
    gumbel = -torch.log(-torch.log(uniform.clamp(min=1e-12)))
    choice = (restart_skew * deltas.to(gumbel.dtype) + gumbel).argmax(0)  # [B, C]
    order = candidates.gather(0, choice[None, ..., None].expand(1, -1, -1, length))[0]
    delta_now = deltas.gather(0, choice[None])[0].to(scores.dtype)
    pos = torch.empty_like(order).scatter_(
        -1, order, torch.arange(length, device=order.device).expand_as(order).contiguous()
    )
    higher_after, lower_before, _ = position_counts(order, tables)
    real = _real_positions(tables, length)
    scale = (2.0 / tables.pairs).to(scores.dtype)[:, None, None]
    coef_at = torch.where(real, (higher_after - lower_before).to(scale.dtype) * scale, 0.0)
    state = (order, pos, _gather(scores, order), _gather(tables.levels, order), coef_at)
    return (*state, delta_now, order_hashes(order, tables))


def _baseline_repeat(tables: QueryTables, times: int) -> QueryTables:
    """The tables of ``times`` stacked copies of the batch (query b of copy t at t·B + b)."""
    fields = {}
    for name, value in tables._asdict().items():
        is_batched = isinstance(value, torch.Tensor) and name != "discount"
        fields[name] = value.repeat(times, *([1] * (value.dim() - 1))) if is_batched else value
    return QueryTables(**fields)


def _baseline_swapped_delta(
    tables: QueryTables,
    order: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    la: torch.Tensor,
    lb: torch.Tensor,
    level_at: torch.Tensor,
    window: torch.Tensor,
    delta_now: torch.Tensor,
) -> torch.Tensor:
    """Δ after swapping the documents a (position p) and b (position q > p), [B, C]."""
    if tables.delta == "auc":
        zero = torch.zeros((), dtype=la.dtype, device=la.device)
        crossing = torch.where(window, (la - level_at).sign() + (level_at - lb).sign(), zero)
        inversions = (la - lb).sign().squeeze(-1) + crossing.sum(-1)
        return delta_now + inversions.to(delta_now.dtype) / tables.pairs[:, None]
    if tables.delta == "ndcg":
        gain_a, gain_b = tables.gain.gather(1, a.squeeze(-1)), tables.gain.gather(1, b.squeeze(-1))
        disc_p, disc_q = tables.discount[p.squeeze(-1)], tables.discount[q.squeeze(-1)]
        dcg_change = (gain_b - gain_a) * (disc_p - disc_q)
        ideal = tables.ideal_dcg[:, None]
        safe = torch.where(ideal > 0, ideal, torch.ones_like(ideal))
        return torch.where(ideal > 0, delta_now - dcg_change / safe, delta_now)
    relevant_at = _gather(tables.relevant, order)
    rel_a, rel_b = relevant_at.gather(-1, p), relevant_at.gather(-1, q)
    relevant_at = relevant_at.scatter(-1, p, rel_b).scatter(-1, q, rel_a)
    return _map_delta(relevant_at, tables.num_relevant)


def baseline_set_log_sum_exp(
    scores: torch.Tensor, sampled: SampleSet, ideal_hash: torch.Tensor, objective: str
) -> torch.Tensor:
    keep = first_occurrences(sampled.hashes) & (sampled.hashes != ideal_hash)
    deltas, coefficients = sampled.deltas, sampled.coefficients.to(scores.dtype)
    linear = torch.bmm(coefficients, scores.unsqueeze(-1)).squeeze(-1)  # c(y)·s, [B, S]
    dropped = torch.full_like(linear, torch.finfo(linear.dtype).min / 4)  # exp() underflows to 0
    ideal = torch.zeros_like(linear[:, :1])

    def set_lse(exponents: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
        return torch.cat([ideal, torch.where(kept, exponents, dropped)], 1).logsumexp(-1)

    if objective == "mle":
        return set_lse(linear, keep)
    if objective == "convex":
        return set_lse(deltas + linear, keep)
    gain = 1.0 - deltas
    usable = keep & (gain > 0)
    log_gain = torch.where(usable, gain, torch.ones_like(gain)).log()
    return set_lse(linear, keep) - set_lse(linear + log_gain, usable)


def baseline_convex_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    delta: str = "auc",
    num_samples: int = 1000,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The sampled path of ``convex_loss`` (objective convex, mean) with the baseline pieces."""
    check_list_inputs(scores, labels, mask)
    valid = valid_queries(labels, mask)
    safe = torch.where(mask, scores, torch.zeros_like(scores))
    tables = query_tables(labels, mask, delta=delta, dtype=scores.dtype)
    sampled = baseline_run_sampler(
        safe.detach(), tables, num_samples=num_samples, generator=generator
    )
    ideal_hash = order_hashes(tables.ideal.unsqueeze(1), tables)
    per_query = baseline_set_log_sum_exp(safe, sampled, ideal_hash, "convex")
    return reduce_queries(per_query, valid, "mean")


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def paired_medians(old, new, device: torch.device, repeats: int) -> tuple[float, float]:
    """Median seconds of ``old()`` and ``new()``, measured alternately (after one warm-up each)
    so that load changes on a shared machine hit both alike: CPU time of this process on CPU
    (robust on a shared machine), else wall time (:func:`measure.device_clock`)."""
    clock = measure.device_clock(device)
    times: dict = {old: [], new: []}
    old(), new()
    for _ in range(repeats):
        for fn in (old, new):
            times[fn].append(measure.call_seconds(fn, clock, device))
    return statistics.median(times[old]), statistics.median(times[new])


def ratio(old: float, new: float) -> str:
    return f"{old / new:.1f}×" if new > 0 else "n/a"


def batch_table(args, device: torch.device) -> str:
    lines = [
        f"ConvexLoss per batch, B = {args.batch}, device = {device}, threads = "
        f"{torch.get_num_threads()} (median of {args.repeats}, old and new alternating; seconds "
        f"of {'process CPU time' if device.type == 'cpu' else 'wall time'}). Defaults otherwise: "
        "restart skew -20, T = 10, Metropolis, C = S/T chains.",
        "",
        "| Δ | L | S | sampler old | sampler new | × | set-LSE fwd+bwd old | new | × | "
        "convex_loss fwd+bwd old | new | × |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for delta in args.deltas:
        for length in args.lengths:
            g = torch.Generator(device=device).manual_seed(0)
            labels = torch.randint(0, 3, (args.batch, length), generator=g, device=device).float()
            mask = torch.ones(args.batch, length, dtype=torch.bool, device=device)
            scores = torch.randn(args.batch, length, generator=g, device=device)
            leaf = scores.clone().requires_grad_(True)
            tables = query_tables(labels, mask, delta=delta)
            ideal_hash = order_hashes(tables.ideal.unsqueeze(1), tables)
            for samples in args.samples:
                g_old = torch.Generator(device=device).manual_seed(1)
                g_new = torch.Generator(device=device).manual_seed(1)

                def sample_old(samples=samples, tables=tables, g=g_old, scores=scores):
                    return baseline_run_sampler(scores, tables, num_samples=samples, generator=g)

                def sample_new(samples=samples, tables=tables, g=g_new, scores=scores):
                    return run_sampler(
                        scores, tables, num_samples=samples, generator=g, keep_orders=False
                    )

                drawn_old, drawn_new = sample_old(), sample_new()

                def lse_old(drawn=drawn_old, ideal_hash=ideal_hash, leaf=leaf):
                    baseline_set_log_sum_exp(leaf, drawn, ideal_hash, "convex").mean().backward()

                def lse_new(drawn=drawn_new, ideal_hash=ideal_hash, leaf=leaf):
                    set_log_sum_exp(leaf, drawn, ideal_hash, "convex").mean().backward()

                def loss_old(samples=samples, delta=delta, g=g_old, data=(leaf, labels, mask)):
                    baseline_convex_loss(
                        *data, delta=delta, num_samples=samples, generator=g
                    ).backward()

                def loss_new(samples=samples, delta=delta, g=g_new, data=(leaf, labels, mask)):
                    convex_loss(*data, delta=delta, num_samples=samples, generator=g).backward()

                s_old, s_new = paired_medians(sample_old, sample_new, device, args.repeats)
                l_old, l_new = paired_medians(lse_old, lse_new, device, args.repeats)
                t_old, t_new = paired_medians(loss_old, loss_new, device, args.repeats)
                lines.append(
                    f"| {delta} | {length} | {samples} | {s_old:.4f} | {s_new:.4f} | "
                    f"{ratio(s_old, s_new)} | {l_old:.4f} | {l_new:.4f} | {ratio(l_old, l_new)} | "
                    f"{t_old:.4f} | {t_new:.4f} | **{ratio(t_old, t_new)}** |"
                )
    return "\n".join(lines) + "\n"


def epoch_table(args, device: torch.device) -> str:
    """Seconds for one training epoch (sampling + loss + backward + Adam) on MQ2008, old and new."""
    from differank.datamodules.download import data_home
    from differank.datamodules.letor import LetorDataModule

    data = LetorDataModule(data_home() / "MQ2008", fold=args.epoch_fold)
    data.setup()
    batches = [{k: v.to(device) for k, v in b.items()} for b in data.train_dataloader()]
    queries = sum(b["mask"].shape[0] for b in batches)
    longest = max(b["mask"].shape[1] for b in batches)
    lines = [
        f"One training epoch on MQ2008 fold {args.epoch_fold} train ({queries} queries in "
        f"{len(batches)} batches, lists up to {longest}), linear scorer + Adam, device = {device}, "
        f"threads = {torch.get_num_threads()} (median of {args.repeats} epochs, old and new "
        "alternating)",
        "",
        "| setting | old s / epoch | new s / epoch | × |",
        "|---|---|---|---|",
    ]

    def epoch(loss_fn, options):
        torch.manual_seed(0)
        linear = torch.nn.Linear(batches[0]["features"].shape[-1], 1).to(device)
        optimizer = torch.optim.Adam(linear.parameters(), lr=0.01)

        def run():
            for batch in batches:
                scores = linear(batch["features"]).squeeze(-1)
                loss = loss_fn(scores, batch["labels"], batch["mask"], **options)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        return run

    for delta in args.deltas:
        for samples in args.samples:
            options = dict(delta=delta, num_samples=samples)
            old_epoch, new_epoch = epoch(baseline_convex_loss, options), epoch(convex_loss, options)
            old, new = paired_medians(old_epoch, new_epoch, device, args.repeats)
            lines.append(f"| {delta}, S = {samples} | {old:.2f} | {new:.2f} | {ratio(old, new)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="*", default=[16, 64, 128])
    parser.add_argument("--samples", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--deltas", nargs="*", default=["auc", "ndcg", "map"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epoch-fold", type=int, default=None)
    parser.add_argument("--out", type=Path, help="also write the tables (markdown) here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    command = "python benchmarks/convex_throughput.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    tables = [f"`{command.strip()}`\n", batch_table(args, device)]
    print(tables[-1], flush=True)
    if args.epoch_fold is not None:
        tables.append(epoch_table(args, device))
        print(tables[-1], flush=True)
    meta = measure.metadata_line(measure.run_metadata(device))
    print(meta, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join([*tables, meta]))
    return tables


if __name__ == "__main__":
    main()

"""Click runs end to end through train.py: every click model trains and is tested on the true
labels; a log written by task=simulate trains exactly the model of the online simulation; an
online run resumed from last.ckpt ends bit for bit like the uninterrupted one; a click run's
checkpoint restores under the usual trust rules."""

from __future__ import annotations

import itertools
import json
import logging
import math

import numpy as np
import pytest
import torch
from hydra.utils import instantiate

import differank
from differank.datamodules.clicks.click_log import read_click_log
from differank.datamodules.clicks.shown_lists import plackett_luce_rows, top_k_rows
from differank.rankers.run.production import production_scores, sampled_queries, shown_lists
from differank.rankers.run.runs import compose_config
from tests.conftest import TINY_DATA, run_config

RUN = [*TINY_DATA, "trainer.max_epochs=1", "logger=csv", "quiet=true"]


def clicks(model: str) -> list[str]:
    """A simulating click run's overrides: ``model``, six documents shown."""
    return [f"clicks={model}", "clicks.top_k=6"]


def weights(run_dir, checkpoint="best.ckpt"):
    state = torch.load(run_dir / "checkpoints" / checkpoint, weights_only=True)["state_dict"]
    return {key: value for key, value in state.items() if key.startswith("ranker.")}


def test_a_simulated_log_trains_the_model_the_online_simulation_trains(tmp_path):
    seed = ["seed=3", "data.bucket_by_length=false"]
    online = differank.run(
        [*RUN, *seed, *clicks("pbm"), "clicks.eta=2"], output_dir=tmp_path / "online"
    )
    log = tmp_path / "clicks.npz"
    simulate = [*RUN, *seed, *clicks("pbm"), "clicks.eta=2", "task=simulate", f"clicks.log={log}"]
    run_config(simulate, tmp_path / "simulate")
    inode = log.stat().st_ino
    written = read_click_log(log)
    assert written.propensity is not None and written.click.any()
    assert written.train_qids_sha256 and written.train_files_sha256  # the data it belongs to
    first = log.read_bytes()
    run_config([*simulate, "clicks.overwrite=true"], tmp_path / "again")
    assert log.read_bytes() == first and log.stat().st_ino != inode  # replaced, when asked
    logged = [*RUN, *seed, "clicks=log", f"clicks.log={log}"]
    offline = differank.run(logged, output_dir=tmp_path / "off")
    assert offline.best_validation == online.best_validation
    assert offline.test_metrics == online.test_metrics
    for key, value in weights(online.run_dir).items():
        assert torch.equal(value, weights(offline.run_dir)[key]), key
    reseeded = [*RUN, "seed=4", *clicks("pbm"), "clicks.eta=2"]
    other = differank.run(reseeded, output_dir=tmp_path / "other")
    assert other.test_metrics != online.test_metrics  # another seed: other sessions, another model


def test_an_online_click_run_resumed_from_last_ckpt_ends_like_the_uninterrupted_one(tmp_path):
    """Two epochs of clicks=pbm ultr=ips, against the same run stopped after its first epoch
    and resumed from last.ckpt for the second: the resumed epoch draws the sessions the
    uninterrupted run drew (keyed by seed, epoch and batch index, not by the batches this
    process drew), so the weights are equal bit for bit."""
    ips = [*TINY_DATA, "data.batch_size=8", "logger=csv", "quiet=true", *clicks("pbm"), "ultr=ips"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    run_config([*ips, "trainer.max_epochs=2"], whole)
    run_config([*ips, "trainer.max_epochs=1"], stopped)
    last = stopped / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["epoch"] == 0
    first_epoch = weights(stopped, "last.ckpt")
    run_config([*ips, "trainer.max_epochs=2", f"ckpt_path={last}"], stopped)
    assert torch.load(last, weights_only=True)["epoch"] == 1  # the second epoch trained
    resumed, expected = weights(stopped, "last.ckpt"), weights(whole, "last.ckpt")
    assert resumed.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(resumed[key], value), key
        assert not torch.equal(first_epoch[key], value), key  # the second epoch moved it
    metrics = [json.loads((run / "test_metrics.json").read_text()) for run in (whole, stopped)]
    assert metrics[0] == metrics[1]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["cascade", "dcm", "ubm", "trust", "cbcm"])
def test_every_click_model_trains_and_is_tested_on_the_true_labels(tmp_path, model):
    metrics = differank.run([*RUN, *clicks(model)], output_dir=tmp_path).test_metrics
    assert 0 < metrics["map"] <= 1


@pytest.mark.slow
def test_a_click_run_checkpoint_is_tested_like_any_other(tmp_path):
    fitted = differank.run([*RUN, *clicks("pbm")], output_dir=tmp_path / "fit").test_metrics
    checkpoint = tmp_path / "fit" / "checkpoints" / "best.ckpt"
    run_config(
        [*TINY_DATA, "task=test", f"ckpt_path={checkpoint}", "quiet=true"], tmp_path / "test"
    )
    tested = json.loads((tmp_path / "test" / "test_metrics.json").read_text())
    assert tested["map"] == fitted["map"]


def test_offline_without_a_log_and_simulate_without_a_model_are_refused(tmp_path):
    with pytest.raises(ValueError, match="clicks.log=PATH"):
        differank.run([*RUN, *clicks("pbm"), "clicks.mode=offline"], output_dir=tmp_path / "a")
    with pytest.raises(ValueError, match="task=simulate needs a click model"):
        run_config([*RUN, "task=simulate"], tmp_path / "b")


@pytest.mark.parametrize(
    ("n_queries", "fraction", "count"),
    [(1000, 0.001, 1), (1000, 0.01, 10), (1000, 0.1, 100), (1000, 1, 1000), (40, 0.001, 1)],
)
def test_the_production_sample_is_the_asked_share_and_at_least_one_query(
    n_queries, fraction, count
):
    chosen = sampled_queries(n_queries, fraction, seed=0)
    assert len(chosen) == count and len(set(chosen.tolist())) == count
    assert (np.diff(chosen) > 0).all() and 0 <= chosen.min() and chosen.max() < n_queries
    if count < n_queries:
        assert not np.array_equal(chosen, sampled_queries(n_queries, fraction, seed=1))


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5, float("nan"), True, "0.1"])
def test_a_production_fraction_outside_0_1_is_refused_naming_the_option(fraction):
    with pytest.raises(ValueError, match=r"clicks.production.fraction must be in \(0, 1\]"):
        sampled_queries(10, fraction, 0)


def test_the_production_ranker_learns_from_the_asked_number_of_queries(tmp_path, caplog):
    cfg = compose_config([*RUN, *clicks("pbm"), "clicks.production.fraction=0.1"], run_dir=tmp_path)
    with caplog.at_level(logging.INFO, logger="differank.rankers.run.production"):
        production_scores(instantiate(cfg.data), cfg.clicks.production, seed=0)
    assert "trained on 4 of 40 training queries" in caplog.text


def test_plackett_luce_draws_match_the_model_s_probabilities_in_float64():
    """First positions as often as softmax(scores / T); (first, second) pairs as often as
    p_i · p_j / (1 − p_i): each within 5 standard errors over 100,000 draws."""
    scores = np.array([2.0, 1.0, 0.5, 0.0, -1.0])
    temperature, draws = 0.7, 100_000
    rows = [np.arange(len(scores))] * draws
    shown = np.stack(plackett_luce_rows(scores, rows, 2, temperature, np.random.default_rng(4)))
    weights = np.exp((scores - scores.max()) / temperature)
    first = weights / weights.sum()
    for i, p in enumerate(first):
        observed = float(np.mean(shown[:, 0] == i))
        assert abs(observed - p) <= 5 * math.sqrt(p * (1 - p) / draws), (i, observed, p)
    for i, j in itertools.permutations(range(len(scores)), 2):
        p = first[i] * first[j] / (1 - first[i])
        observed = float(np.mean((shown[:, 0] == i) & (shown[:, 1] == j)))
        assert abs(observed - p) <= 5 * math.sqrt(p * (1 - p) / draws) + 1e-12, (i, j, observed)


def test_a_cold_plackett_luce_ranker_shows_the_top_k_and_a_warm_one_other_lists():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=60)
    rows = [np.arange(q * 12, q * 12 + 12) for q in range(5)]
    top = top_k_rows(scores, rows, 4)
    cold = plackett_luce_rows(scores, rows, 4, 1e-6, np.random.default_rng(1))
    warm = plackett_luce_rows(scores, rows, 4, 5.0, np.random.default_rng(1))
    again = plackett_luce_rows(scores, rows, 4, 5.0, np.random.default_rng(1))
    assert all(np.array_equal(a, b) for a, b in zip(top, cold, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(top, warm, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(warm, again, strict=True))
    for shown, query in zip(warm, rows, strict=True):
        assert len(set(shown.tolist())) == 4 and set(shown.tolist()) <= set(query.tolist())


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf"), float("nan"), "hot"])
def test_a_bad_production_temperature_is_refused_naming_the_option(temperature):
    with pytest.raises(ValueError, match="clicks.production.temperature must be a finite"):
        plackett_luce_rows(np.zeros(3), [np.arange(3)], 2, temperature, np.random.default_rng())


def test_a_stochastic_production_ranker_shows_plackett_luce_lists_in_a_click_run(tmp_path):
    overrides = [*RUN, *clicks("pbm"), "clicks.production.max_epochs=1"]
    cfg = compose_config([*overrides, "clicks.production.temperature=2.0"], run_dir=tmp_path)
    assert compose_config(overrides, run_dir=tmp_path).clicks.production.temperature is None
    data = instantiate(cfg.data)
    stochastic = shown_lists(data, cfg.clicks.production, 6, seed=0)
    assert all(len(rows) <= 6 for rows in stochastic)
    again = shown_lists(data, cfg.clicks.production, 6, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(stochastic, again, strict=True))
    cfg.clicks.production.temperature = None
    deterministic = shown_lists(data, cfg.clicks.production, 6, seed=0)
    assert len(deterministic) == len(stochastic) == 40
    assert not all(np.array_equal(a, b) for a, b in zip(deterministic, stochastic, strict=True))


def test_whole_or_absent_simulate_refuses_an_existing_log_unless_overwrite(tmp_path):
    log = tmp_path / "clicks.npz"
    log.write_text("the user's file")
    simulate = [*RUN, *clicks("pbm"), "task=simulate", f"clicks.log={log}"]
    with pytest.raises(FileExistsError, match=rf"{log} exists: .* set clicks.overwrite=true"):
        run_config(simulate, tmp_path / "refused")
    assert log.read_text() == "the user's file"
    assert compose_config(simulate, run_dir=tmp_path / "default").clicks.overwrite is False

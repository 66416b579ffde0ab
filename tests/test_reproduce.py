"""``benchmarks/reproduce.py`` chooses its rows: ``--overrides`` gives one row of its own, which
``--peers`` adds to rather than replaces; ``--sweep`` gives each row once per value; every
experiment it names has its ``conf/experiment`` file."""

from __future__ import annotations

import peers  # benchmarks/ is on the path (tests/conftest.py), as in `python benchmarks/x.py`
import pytest
import reproduce


class Chosen(Exception):
    """Raised in place of running the rows: the test only looks at which rows were chosen."""


@pytest.fixture
def chosen_rows(monkeypatch):
    rows = []

    def run_all(configs, *args, **kwargs):
        rows.extend((c.name, c.overrides, c.peer) for c in configs)
        raise Chosen

    monkeypatch.setattr(reproduce, "run_all", run_all)
    monkeypatch.setattr(peers, "available", lambda name: True)  # no LightGBM etc. needed
    return rows


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["--overrides", "loss=listnet", "--peers", "ranksvm"],
            [
                ("loss=listnet", ["loss=listnet"], None),
                ("peer_ranksvm", ["loss=listnet"], "ranksvm"),
            ],
        ),
        (["--overrides", "loss=listnet"], [("loss=listnet", ["loss=listnet"], None)]),
        (["--peers", "ranksvm"], [("peer_ranksvm", [], "ranksvm")]),
        (  # the structured hinge's per-k curve: one experiment, one row per k
            ["--experiment", "hinge_paper", "--sweep", "loss.k=1,2,10"],
            [
                ("hinge_paper_loss.k=1", ["experiment=hinge_paper", "loss.k=1"], None),
                ("hinge_paper_loss.k=2", ["experiment=hinge_paper", "loss.k=2"], None),
                ("hinge_paper_loss.k=10", ["experiment=hinge_paper", "loss.k=10"], None),
            ],
        ),
        (
            ["--overrides", "loss=hinge", "--sweep", "loss.k=range(1,3)", "seed=0,1"],
            [
                (
                    f"loss=hinge_loss.k={k}_seed={s}",
                    [f"loss.k={k}", f"seed={s}", "loss=hinge"],
                    None,
                )
                for k in (1, 2)
                for s in (0, 1)
            ],
        ),
    ],
)
def test_overrides_row_is_kept_when_peers_are_added(chosen_rows, argv, expected):
    with pytest.raises(Chosen):
        reproduce.main([*argv, "--folds", "1"])
    assert chosen_rows == expected


def test_every_suite_experiment_has_its_file():
    names = [
        override.removeprefix("experiment=")
        for configs in reproduce.SUITES.values()
        for config in configs
        for override in config.overrides
        if override.startswith("experiment=")
    ]
    assert names and all((reproduce.EXPERIMENTS / f"{name}.yaml").is_file() for name in names)


def test_an_unknown_experiment_is_refused_before_any_run(chosen_rows, capsys):
    with pytest.raises(SystemExit):
        reproduce.main(["--experiment", "hinge", "no_such_experiment"])
    assert chosen_rows == [] and "no_such_experiment" in capsys.readouterr().err

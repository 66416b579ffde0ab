"""The issue's "done when", tried as a new user would: a script outside the repository reads
MQ2008 fold 1 with ``sklearn.datasets.load_svmlight_file(query_id=True)``, fits
``differank.Ranker(loss="lambdaloss")`` with ``qid=`` and an ``eval_set`` (then with a pandas
DataFrame, then with ``group=`` sizes), predicts the test split and computes NDCG@10, which
equals that of ``python train.py`` with the Ranker's overrides on the same fold to 1e-6."""

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import MQ2008, ROOT, requires_mq2008

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import pandas as pd
    from sklearn.datasets import load_svmlight_file
    import differank

    root, variant = sys.argv[1], sys.argv[2]

    def load(parts):  # MQ2008's Fold1: train S1-S3, validation S4, test S5
        files = [load_svmlight_file(f"{root}/{p}.txt.gz", query_id=True) for p in parts]
        X = np.vstack([f[0].toarray() for f in files])
        return X, np.concatenate([f[1] for f in files]), np.concatenate([f[2] for f in files])

    X, y, qid = load(["S1", "S2", "S3"])
    Xv, yv, qv = load(["S4"])
    Xt, yt, qt = load(["S5"])
    ranker = differank.Ranker(loss="lambdaloss", max_epochs=2, seed=0, verbose=False)
    if variant == "qid":
        ranker.fit(X, y, qid=qid, eval_set=[(Xv, yv)], eval_qid=[qv])
        ndcg = ranker.score(Xt, yt, qid=qt)
    elif variant == "dataframe":
        frame = lambda X, q: pd.DataFrame(X).rename(columns=str).assign(qid=q)
        ranker.fit(frame(X, qid), y, eval_set=[(frame(Xv, qv), yv)])
        ndcg = ranker.score(frame(Xt, qt), yt)
    else:  # LightGBM's group sizes: MQ2008's rows of a query are contiguous
        sizes = lambda q: np.diff(np.flatnonzero(np.r_[True, q[1:] != q[:-1], True]))
        ranker.fit(X, y, group=sizes(qid), eval_set=[(Xv, yv)], eval_group=[sizes(qv)])
        ndcg = ranker.score(Xt, yt, group=sizes(qt))
    print(json.dumps({"ndcg@10": ndcg, "overrides": ranker.overrides_}))
    """
)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "rank_mq2008.py"
    path.write_text(SCRIPT)
    return path


def run_script(script, variant: str) -> dict:
    result = subprocess.run(
        [sys.executable, str(script), str(MQ2008), variant],
        cwd=script.parent,  # outside the repository
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def train_py_ndcg(script, tmp_path_factory):
    """NDCG@10 of ``python train.py`` with the Ranker's overrides on MQ2008 fold 1."""
    overrides = run_script(script, "qid")["overrides"]
    run_dir = tmp_path_factory.mktemp("train_py")
    command = [sys.executable, "train.py", *overrides, "data=letor", f"data.root={MQ2008}"]
    command += ["data.fold=1", f"hydra.run.dir={run_dir}", "quiet=true"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((run_dir / "test_metrics.json").read_text())["ndcg@10"]


@pytest.mark.slow  # four MQ2008 trainings: about 2 minutes
@requires_mq2008
@pytest.mark.parametrize("variant", ["qid", "dataframe", "group"])
def test_a_new_users_script_gets_train_pys_ndcg(script, train_py_ndcg, variant):
    assert run_script(script, variant)["ndcg@10"] == pytest.approx(train_py_ndcg, abs=1e-6)

"""The web-scale data path benchmark's pieces: MSLR-shaped LETOR text round-trips through the
reader, and the report's criteria (benchmarks/data_path.py)."""

from pathlib import Path

import numpy as np
from data_path import lightgbm_copies, report  # benchmarks/ is on the path (tests/conftest.py)

from differank.datamodules.mslr_synthetic import generate_mslr, letor_text
from differank.datamodules.reader import read_letor_file


def test_mslr_text_reads_back_as_the_rounded_features(tmp_path):
    data = generate_mslr(n_queries=15, n_docs=300, n_features=12, max_list=40, seed=2)
    path = tmp_path / "mslr.txt"
    path.write_bytes(letor_text(data, first_qid=5))  # qids 5..19: one and two digits
    parsed = read_letor_file(path, cache_dir=tmp_path / "cache")
    expected = np.rint(np.clip(data.features * 1.5 + 5.0, 0, 9.999999).astype(np.float64) * 1e6)
    np.testing.assert_array_equal(parsed.features, (expected / 1e6).astype(np.float32))
    np.testing.assert_array_equal(parsed.labels, data.labels)
    np.testing.assert_array_equal(parsed.qids, np.repeat(np.arange(5, 20), data.lengths))


def test_lightgbm_copies_move_the_qids_to_query_files(tmp_path):
    data = generate_mslr(n_queries=6, n_docs=40, n_features=5, max_list=12, seed=3)
    path = tmp_path / "train.txt"
    path.write_bytes(letor_text(data, first_qid=9))
    (copy,) = lightgbm_copies([str(path)], tmp_path / "lightgbm")
    original = path.read_text().splitlines()
    stripped = Path(copy).read_text().splitlines()
    assert stripped == [
        " ".join(t for t in line.split() if not t.startswith("qid:")) for line in original
    ]
    sizes = [int(n) for n in Path(f"{copy}.query").read_text().split()]
    assert sizes == data.lengths.tolist()


def test_report_states_each_criterion():
    info = {
        "fraction": 0.125,
        "queries": 10,
        "docs": 1000,
        "features": 136,
        "float32_bytes": 2**28,
        "text_bytes": 2**30,
    }
    phases = {"imports": 1.0, "data setup (all)": 6.0}
    runs = {
        "cold (parse + cache)": {
            "wall": 12,
            "wall_inside": 11,
            "peak_rss": 2**30,
            "phases": phases,
        },
        "warm (cache)": {
            "wall": 6,
            "wall_inside": 5,
            "peak_rss": 2**29,
            "phases": {"imports": 1.0, "data setup (all)": 0.1},
        },
        "tiny default data": {
            "wall": 5,
            "wall_inside": 4,
            "peak_rss": 2**29,
            "phases": {"imports": 1.0, "data setup (all)": 0.1},
        },
    }
    ddp = {"pss": 2**30, "rss": 2**31, "features_pss": 2**28, "features_rss": 2**29, "processes": 3}
    text = report(info, {"xgboost DMatrix": {"seconds": 4.0, "peak_rss": 2**29}}, runs, ddp)
    assert (
        "| cold parse: cold - warm, wall (after imports) | 6.0 s (6.0 s) | <= 2 x XGBoost "
        "4.0 s = 8.0 s | yes |" in text
    )
    assert "| cold - warm data setup (parse + hash + cache + normalise) | 5.9 s" in text
    assert "1.00 copies of the 0.25 GiB features | 1 copy | yes |" in text
    assert "| cold peak RSS | 1.00 GiB | <= 2 x raw + 1.5 GiB = 2.00 GiB | yes |" in text

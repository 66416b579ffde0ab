"""The fresh-install benchmark's pieces (benchmarks/fresh_install.py): the reader worker and the
report's criteria. The real run (several train.py runs on MQ2008) is not part of the suite."""

from fresh_install import Run, reader_worker, report  # benchmarks/ is on the path (conftest.py)

from differank.datamodules.mslr_synthetic import generate_mslr, letor_text

INFO = {"fraction": 0.125, "docs": 1000, "text_bytes": 2**30}


def test_the_reader_worker_parses_every_file_into_an_empty_cache(tmp_path):
    data = generate_mslr(n_queries=6, n_docs=50, n_features=4, max_list=12, seed=1)
    files = []
    for name in ("train.txt", "test.txt"):
        (tmp_path / name).write_bytes(letor_text(data))
        files.append(str(tmp_path / name))
    result = reader_worker(files, str(tmp_path / "cache"))
    assert result["rows"] == 100 and result["seconds"] > 0
    assert any((tmp_path / "cache" / "letor").iterdir())


def test_report_states_both_criteria():
    parse = {"differank read_letor_file (empty cache)": 9.0, "xgboost DMatrix": 6.0}
    train = {
        "fresh install": Run(12.0, 10.0),
        "again": Run(10.0, 8.0),
        "no bytecode at all": Run(25.0, 20.0),
    }
    text = report("python benchmarks/fresh_install.py", INFO, train, parse)
    assert "| fresh install | 12.0 | 1.20 | 10.0 | 1.25 |" in text
    assert (
        "| first run after install / same run again, wall (CPU) | 1.20 (1.25) | <= 1.3 | yes |"
        in text
    )
    assert "| parse / XGBoost DMatrix | 1.50 | <= 2 | yes |" in text
    slow = {**train, "fresh install": Run(14.0, 10.0)}
    parse_slow = {**parse, "differank read_letor_file (empty cache)": 13.0}
    text = report("python benchmarks/fresh_install.py", INFO, slow, parse_slow)
    assert "| 1.40 (1.25) | <= 1.3 | NO |" in text and "| 2.17 | <= 2 | NO |" in text

"""benchmarks/from_lightgbm.py (docs/from_lightgbm.md) runs: LightGBM and differank.Ranker on
one MQ2008 fold, each row's metrics those of its own model's scores."""

import re

import pytest

from tests.conftest import MQ2008, requires_mq2008


@pytest.mark.slow  # LightGBM and two Ranker epochs on MQ2008: about 30 s
@requires_mq2008
def test_the_side_by_side_script_prints_both_rows(tmp_path):
    pytest.importorskip("lightgbm")
    import from_lightgbm

    out = tmp_path / "from_lightgbm.md"
    text = from_lightgbm.main(["--root", str(MQ2008), "--max-epochs", "2", "--out", str(out)])
    assert out.read_text() == text
    rows = re.findall(
        r"^\| (LightGBM|differank) \|.*\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| [\d.]+ \|$",
        text,
        flags=re.M,
    )
    assert [row[0] for row in rows] == ["LightGBM", "differank"]
    for _, val, test, test_map in rows:
        assert 0.1 < float(test) < 0.6 and 0.1 < float(val) < 0.6 and 0.3 < float(test_map) < 0.8
    assert "--max-epochs 2" in text  # the command that made the numbers is printed with them

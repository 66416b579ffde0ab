"""docs/serving.md's Python examples (its ``>>>`` lines) run and print what they show."""

import doctest

from tests.conftest import ROOT


def test_the_serving_guide_examples_run():
    result = doctest.testfile(
        str(ROOT / "docs" / "serving.md"),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
    )
    assert result.attempted >= 5 and result.failed == 0, result

"""docs/python.md's examples run and print what the page shows."""

import doctest
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[3] / "docs" / "python.md"


def test_the_python_pages_examples_run():
    pytest.importorskip("sklearn")
    pytest.importorskip("pandas")
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testfile(str(PAGE), module_relative=False, optionflags=flags)
    assert result.attempted > 10 and result.failed == 0

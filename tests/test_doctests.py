"""The examples in the library's docstrings run and print what they show (every module of the
installed ``differank`` package)."""

import doctest
import importlib
import pkgutil

import pytest

import differank


def _modules() -> list[str]:
    import differank.datamodules
    import differank.losses
    import differank.rankers

    names = []
    for package in (differank.losses, differank.rankers, differank.datamodules):
        names.append(package.__name__)
        prefix = package.__name__ + "."
        names += [info.name for info in pkgutil.walk_packages(package.__path__, prefix)]
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_package_has_a_version():
    assert differank.__version__

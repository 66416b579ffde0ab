"""The checkpoint room's names at their old paths (``differank.rankers.training.checkpoints``,
``differank.rankers.run.restore``, ``differank.rankers.run.export``) still import for one
release: the same object, with a DeprecationWarning naming the new import."""

import importlib

import pytest

from differank.rankers.checkpoints.old_paths import MOVED

OLD_NAMES = [(old, name) for old, names in MOVED.items() for name in names]


@pytest.mark.parametrize("old, name", OLD_NAMES, ids=lambda value: value)
def test_each_old_name_is_its_new_object_with_a_warning_naming_the_new_import(old, name):
    new = MOVED[old][name]
    with pytest.warns(DeprecationWarning, match=rf"`from {new} import {name}`"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


def test_the_old_import_statement_warns_too():
    with pytest.warns(DeprecationWarning, match="differank.rankers.run.export.Scorer moved"):
        from differank.rankers.run.export import Scorer
    from differank.rankers.checkpoints import Scorer as moved

    assert Scorer is moved


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_unknown_name_at_an_old_path_is_an_attribute_error(old):
    with pytest.raises(AttributeError, match=f"module '{old}' has no attribute 'nothing_here'"):
        _ = importlib.import_module(old).nothing_here


def test_the_new_room_exports_each_name_it_holds():
    room = importlib.import_module("differank.rankers.checkpoints")
    moved_here = {
        name for names in MOVED.values() for name, new in names.items() if new == room.__name__
    }
    assert moved_here <= set(room.__all__)

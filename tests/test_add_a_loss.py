"""Adding a loss touches five files: in a copy of the repository, a toy loss is added by the
steps of docs/architecture.md#how-to-add-a-loss alone, and what the suite checks for a loss then
passes for it: the contract suite against its float64 oracle, its config, the guide's command,
the docs links, and a ``train.py`` run whose checkpoint restores it (slow: pytest and train.py
run in the copy)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY_DATA

pytestmark = pytest.mark.slow

TOY_LOSS = '''"""A toy loss, the squared error to the labels: the example of
docs/architecture.md#how-to-add-a-loss; docs/objectives/foo.md."""

from __future__ import annotations

import torch

from differank.losses.inputs import (
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import LISTWISE, LossModule
from differank.losses.options import POSITIVE
from differank.losses.reduction import check_reduction, reduce_queries


@list_loss()
def foo_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """``L_q = scale · Σ_i (s_i - l_i)²`` over the real documents (docs/objectives/foo.md).

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> foo_loss(torch.tensor([1.0, 0.0]), torch.tensor([1, 2]))
        tensor(4.)
    """
    check_reduction(reduction)
    POSITIVE.check("foo_loss", scale=scale)
    scores, labels, mask, valid = list_inputs(scores, labels, mask)
    safe = finite_scores(scores, mask)
    per_query = scale * torch.where(mask, (safe - labels).square(), 0.0).sum(dim=-1)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class FooLoss(LossModule, function=foo_loss, memory=LISTWISE):
    """Module form of :func:`foo_loss`."""
'''

TOY_CONFIG = """# A toy loss, the squared error to the labels; docs/objectives/foo.md.
_target_: differank.losses.foo.FooLoss
scale: 1.0  # multiplies every query's loss
reduction: mean
"""

TOY_REGISTRY_IMPORT = "from differank.losses.foo import FooLoss, foo_loss\n"
TOY_REGISTRY_ENTRY = """        # fp16 holds its gradient 2(s - l) up to scores of 3e4, as MSE's
        LossCase(
            "foo",
            foo_loss,
            FooLoss,
            oracles.per_query_oracle(lambda s, y: ((s - y) ** 2).sum()),
            half_scale=1e3,
            refuses={"scale": [0.0]},
        ),
"""

TOY_PAGE = """# Foo loss (a toy)

`loss=foo`, `differank.losses.foo`: the squared error of each real document's score to its
label, summed per query and scaled by `scale`.

## Defaults

`scale: 1.0`, `reduction: mean` (conf/loss/foo.yaml).
"""

TOY_GUIDE_ROW = (
    "| [foo](objectives/foo.md), `loss=foo` | the squared error to the labels | the walkthrough "
    "of adding a loss | `python train.py model=linear loss=foo` |\n"
)


def git(copy: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=copy, capture_output=True, text=True, check=True).stdout


def copy_of_the_repository(folder: Path) -> Path:
    """The working tree's files (tracked, and untracked but not ignored; src/differank's links as
    links) in a fresh git repository, committed: the state a new engineer starts from. The C
    scanner built by this checkout's install is copied beside its source (git ignores it), as
    the copy's own install would build it."""
    copy = folder / "repo"
    listed = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, set(listed.split("\0"))):
        source, target = ROOT / name, copy / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    for built in (ROOT / "datamodules").glob("_letor_text*.so"):
        shutil.copy2(built, copy / "datamodules" / built.name)
    git(copy, "init", "-q")
    git(copy, "add", "-A")
    git(copy, "commit", "-q", "-m", "before the toy loss")
    return copy


def add_the_foo_loss(copy: Path) -> None:
    """The five steps of docs/architecture.md#how-to-add-a-loss, nothing more."""
    (copy / "losses" / "foo.py").write_text(TOY_LOSS)
    (copy / "conf" / "loss" / "foo.yaml").write_text(TOY_CONFIG)
    registry = copy / "tests" / "loss_registry.py"
    text = registry.read_text()
    text = text.replace(
        "from tests import oracles", TOY_REGISTRY_IMPORT + "from tests import oracles"
    )
    end = text.rindex("    ]\n}\n")  # the end of the CASES list
    registry.write_text(text[:end] + TOY_REGISTRY_ENTRY + text[end:])
    (copy / "docs" / "objectives" / "foo.md").write_text(TOY_PAGE)
    guide = copy / "docs" / "choosing.md"
    lines = guide.read_text().splitlines(keepends=True)
    last_row = max(i for i, line in enumerate(lines) if line.startswith("| [") and "`loss=" in line)
    guide.write_text("".join(lines[: last_row + 1] + [TOY_GUIDE_ROW] + lines[last_row + 1 :]))


def environment(copy: Path) -> dict[str, str]:
    """Python importing ``differank`` from the copy: its ``src/`` comes on the path before this
    venv's editable install (a static path to this checkout's ``src/``)."""
    return {**os.environ, "PYTHONPATH": str(copy / "src"), "PYTHONDONTWRITEBYTECODE": "1"}


def run(copy: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def test_a_foo_loss_takes_five_files_and_passes_the_suite(tmp_path):
    copy = copy_of_the_repository(tmp_path)
    add_the_foo_loss(copy)
    git(copy, "add", "-A")
    touched = git(copy, "diff", "--cached", "--name-only").split()
    assert len(touched) <= 5, touched

    env = environment(copy)
    where = run(copy, env, "-c", "import differank.losses.foo as m; print(m.__file__)")
    assert str(copy) in str(Path(where.stdout.strip()).resolve())  # the copy's code runs
    run(
        copy,
        env,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "tests/losses/test_loss_contract.py",
        "tests/losses/test_loss_api.py",
        "tests/losses/test_loss_options.py",
        "tests/test_configs.py",
        "tests/test_docs.py",
        "tests/test_doctests.py",
        "tests/rankers/training/test_hostile_checkpoints.py",
        "-k",
        "foo or every_loss or guide or references or links or allowed",
    )
    # train, then restore the run from its checkpoint alone: the allowlist admits the toy loss
    first, second = tmp_path / "run", tmp_path / "restored"
    tiny = [*TINY_DATA, "trainer.max_epochs=1", "logger=csv"]
    run(copy, env, "train.py", "model=linear", "loss=foo", *tiny, f"hydra.run.dir={first}")
    best = first / "checkpoints" / "best.ckpt"
    run(copy, env, "train.py", "task=test", f"ckpt_path={best}", "logger=csv",
        f"hydra.run.dir={second}")  # fmt: skip
    metrics = json.loads((second / "test_metrics.json").read_text())
    assert metrics == json.loads((first / "test_metrics.json").read_text())

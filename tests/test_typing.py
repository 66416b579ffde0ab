"""The public API's types are pinned: mypy passes tests/typing/public_api.py, and it refuses a
wrong call, so the pins are not ``Any`` (which would accept anything)."""

import re
from pathlib import Path

import pytest
import torch

from differank.losses import lambda_loss

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_API = ROOT / "tests" / "typing" / "public_api.py"

# Each line is a mistake mypy must report, with its error code.
WRONG_CALLS = {
    "lambda_loss(scores, scores, sigmaa=1.0)": "call-arg",  # a misspelt keyword
    "lambda_loss(scores, scores, reduction=1)": "arg-type",
    "cone_loss(scores, scores, basis=scores)": "call-arg",  # mask is positional before basis
    "differank.Rankr": "attr-defined",  # the lazy names are typed, not any attribute
    "fitted: int = differank.Ranker().fit(X, X, qid=X)": "assignment",
    "scores_: str = differank.Ranker().predict(X)": "assignment",
    "scorer: int = differank.load_ranker('model.ckpt')": "assignment",
    "arrays: int = read_letor('train.txt')": "assignment",
    "path: int = write_parquet('a.parquet', X, X, X)": "assignment",
}
HEADER = """\
import numpy as np
import torch

import differank
from differank.datamodules import read_letor, write_parquet
from differank.losses import cone_loss, lambda_loss

scores = torch.zeros(1, 2)
X = np.zeros(2)
"""


def test_the_public_api_is_pinned_and_a_wrong_call_is_a_type_error(tmp_path, monkeypatch):
    wrong = tmp_path / "wrong_calls.py"
    wrong.write_text(HEADER + "".join(f"{line}\n" for line in WRONG_CALLS))
    first_line = HEADER.count("\n") + 1
    expected = {
        (f"wrong_calls.py:{number}", code)
        for number, code in enumerate(WRONG_CALLS.values(), start=first_line)
    }
    api = pytest.importorskip("mypy.api", reason="mypy is a contributors' tool: pip install .[dev]")
    # this checkout's package, whichever differank is installed (as pyproject.toml's files)
    monkeypatch.setenv("MYPYPATH", str(ROOT / "src"))
    report, errors, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),  # the one `mypy` fills in CI (.ci/run), before pytest
            "--no-pretty",
            str(PUBLIC_API),
            str(wrong),
        ]
    )
    # (file name, line): mypy replays a cached module's errors under the path it had then
    found = set(re.findall(r"^(?:.*/)?(.+?:\d+): error: .*\[([a-z-]+)\]$", report, re.MULTILINE))
    assert found == expected, f"mypy reported:\n{report}{errors}"
    assert status == 1


def test_a_loss_body_called_without_its_decorator_refuses_mask_none():
    """A loss body narrows its ``mask: Tensor | None`` parameter with ``decorated_mask``:
    through ``list_loss`` None is every document real, so None reaching the body itself (an
    undecorated call) is an error that says what to do."""
    scores, labels = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    every_document = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(TypeError, match="call the decorated loss"):
        lambda_loss.__wrapped__(scores, labels, None)
    assert torch.equal(
        lambda_loss.__wrapped__(scores, labels, every_document), lambda_loss(scores, labels)
    )

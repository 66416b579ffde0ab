"""Dependency rules: losses/ imports only torch; rankers/ only torch, but for torchmetrics in
metrics.py and the Hydra / Lightning harness (module.py, sweep_summary.py, ensemble.py);
datamodules/ never imports losses or rankers.
Packaging: only those packages are installed, train.py stays a script."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
# rankers/ modules that may import the framework (Lightning, Hydra): the harness and CLIs
HARNESS = {"module.py", "sweep_summary.py", "ensemble.py"}
# third-party packages other rankers/ modules may import: torch, and torchmetrics for the
# metrics (the functional form and its Metric side by side, as in torchmetrics)
RANKERS_ALLOWED = {"metrics.py": {"torch", "torchmetrics"}}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def third_party(path: Path) -> set[str]:
    return imported_roots(path) - STDLIB - {"losses", "rankers", "datamodules"}


@pytest.mark.parametrize("path", sorted((ROOT / "losses").glob("*.py")), ids=lambda p: p.name)
def test_losses_import_only_torch(path):
    assert third_party(path) <= {"torch"}, f"{path.name} imports {third_party(path) - {'torch'}}"
    assert not imported_roots(path) & {"rankers", "datamodules"}


@pytest.mark.parametrize(
    "path",
    [p for p in sorted((ROOT / "rankers").glob("*.py")) if p.name not in HARNESS],
    ids=lambda p: p.name,
)
def test_rankers_import_only_torch(path):
    allowed = RANKERS_ALLOWED.get(path.name, {"torch"})
    assert third_party(path) <= allowed, f"{path.name} imports {third_party(path) - allowed}"


@pytest.mark.parametrize("path", sorted((ROOT / "datamodules").glob("*.py")), ids=lambda p: p.name)
def test_datamodules_do_not_import_losses_or_rankers(path):
    assert not imported_roots(path) & {"losses", "rankers"}


def test_import_losses_pulls_in_no_framework():
    code = (
        "import sys, losses\n"
        "banned = {'lightning', 'pytorch_lightning', 'hydra', 'omegaconf', 'torchmetrics',\n"
        "          'sklearn', 'scipy'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in banned))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_train_is_a_script_not_an_installed_module(tmp_path):
    """The distribution installs the packages only: from a directory outside the project
    ``import train`` fails and the former top-level ``sweeps`` is gone, while the packages
    resolve to this project when differank is installed (``pip install -e .``)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}

    def run(code):
        return subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    failed = run("import train")
    assert failed.returncode != 0 and "No module named 'train'" in failed.stderr, failed.stderr
    assert "No module named 'sweeps'" in run("import sweeps").stderr
    located = run(
        "import importlib.metadata as m, importlib.util as u\n"
        "m.distribution('differank')  # PackageNotFoundError: not installed\n"
        "print(*(u.find_spec(name).origin for name in ('losses', 'rankers', 'datamodules')))"
    )
    if "PackageNotFoundError" in located.stderr:
        return  # the packages are on sys.path only inside the project: nothing more to check
    assert located.stdout.split() == [
        str(ROOT / name / "__init__.py") for name in ("losses", "rankers", "datamodules")
    ], located.stderr

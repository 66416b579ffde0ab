"""DESIGN "Dependency rules": losses/ imports only torch; rankers/ (but module.py) only torch;
datamodules/ never imports losses or rankers."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


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
    [p for p in sorted((ROOT / "rankers").glob("*.py")) if p.name != "module.py"],
    ids=lambda p: p.name,
)
def test_rankers_import_only_torch(path):
    assert third_party(path) <= {"torch"}, f"{path.name} imports {third_party(path) - {'torch'}}"


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

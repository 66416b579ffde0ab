"""Dependency rules, one per room (no per-file exceptions): each package of ``differank`` may
import the standard library, the third-party packages and the rooms of its rule, nothing else.
The rules are stated in docs/architecture.md#dependency-rules.
Packaging: ``differank`` is the one installed import name (``src/differank``, whose rooms link to
the top-level folders); train.py stays a script; the tested floors are the declared ones."""

import ast
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
LOSSES = "differank.losses"
ALGORITHMS = "differank.losses.algorithms"
SCORERS = "differank.rankers.scorers"
SOLVERS = "differank.rankers.solvers"
METRICS = "differank.rankers.metrics"
TRAINING = "differank.rankers.training"
CHECKPOINTS = "differank.rankers.checkpoints"
RUN = "differank.rankers.run"
TUNING = "differank.rankers.tuning"
STUDENTS = "differank.rankers.students"
DATA = "differank.datamodules"
LIGHTNING = {"pytorch_lightning", "lightning", "lightning_fabric"}
HYDRA = {"hydra", "omegaconf", "yaml"}
ROOMS = ("losses", "rankers", "datamodules")  # the top-level folders installed as differank.*

# room folder -> (the third-party packages it may import, the rooms it may import)
RULES = {
    "losses/algorithms": (
        {"torch"},
        {ALGORITHMS, "differank.losses.inputs", "differank.losses.options"},
    ),
    "losses": ({"torch"}, {LOSSES}),
    "losses/unbiased": ({"torch"}, {LOSSES}),  # the click estimators: torch only, over the losses
    "rankers/scorers": ({"torch"}, {LOSSES, SCORERS}),
    "rankers/solvers": ({"torch"}, {LOSSES, SCORERS, SOLVERS}),
    "rankers/metrics": ({"torch", "torchmetrics", "numpy"}, {LOSSES, METRICS, DATA}),
    "rankers/training": (
        # rich: the console (callbacks.py); numpy: a library fit puts NumPy's random state back
        # (fitting.py)
        {"torch", "torchmetrics", "rich", "numpy"} | LIGHTNING,
        # the data room's memory budget (list_memory.py: one rule for what fits in memory)
        {LOSSES, SCORERS, SOLVERS, METRICS, TRAINING, CHECKPOINTS, "differank.datamodules.reader"},
    ),
    # checkpoint trust: no Lightning (a checkpoint is scored without a Trainer); Hydra's
    # override parser and OmegaConf merge a restored run with the command line (restore.py)
    "rankers/checkpoints": (
        {"torch", "numpy", "hydra", "omegaconf"},
        {LOSSES, SCORERS, DATA, CHECKPOINTS},
    ),
    # tuning: only for task=tune (tasks.py imports it then); students: a tree student's fit
    # and export are tasks of the run (tasks.py)
    "rankers/run": (
        None,
        {LOSSES, SCORERS, SOLVERS, METRICS, TRAINING, CHECKPOINTS, RUN, TUNING, STUDENTS, DATA},
    ),
    # tree students: boosters trained on a teacher's scores through the run layer's teachers,
    # scoring and engine formats; no Lightning (a student's fit has no training loop)
    "rankers/students": (
        {"torch", "numpy", "hydra", "omegaconf", "lightgbm", "xgboost"},
        {METRICS, RUN, STUDENTS, DATA},
    ),
    # the selection protocol (differank tune) runs trials through the run layer
    "rankers/tuning": (None, {METRICS, CHECKPOINTS, RUN, TUNING, DATA}),
    # pyarrow: data.format=parquet (datamodules/parquet.py), imported when Parquet is read
    "datamodules": ({"torch", "numpy", "scipy", "rich", "pyarrow"} | LIGHTNING, {DATA}),
    # click simulation and click logs are data (docs/clicks.md): the data room's rule
    "datamodules/clicks": ({"torch", "numpy", "scipy", "rich", "pyarrow"} | LIGHTNING, {DATA}),
}


def room_of(path: Path) -> str:
    return path.parent.relative_to(ROOT).as_posix()


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def library_files() -> list[Path]:
    return sorted(p for room in RULES for p in (ROOT / room).glob("*.py"))


@pytest.mark.parametrize("path", library_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_room_imports_only_what_its_rule_allows(path):
    third_party_allowed, rooms_allowed = RULES[room_of(path)]
    for name in imports(path):
        root = name.split(".")[0]
        if root in STDLIB:
            continue
        if root == "differank":
            assert name == "differank" or any(
                name == room or name.startswith(room + ".") for room in rooms_allowed
            ), (
                f"{path.relative_to(ROOT)} imports {name}; "
                f"its room may import {sorted(rooms_allowed)}"
            )
        elif third_party_allowed is not None:
            assert root in third_party_allowed, (
                f"{path.relative_to(ROOT)} imports {root}; "
                f"its room may import {sorted(third_party_allowed)}"
            )


def test_every_library_folder_has_a_rule():
    folders = {p.parent.relative_to(ROOT).as_posix() for p in library_files()}
    packaged = {
        p.parent.relative_to(ROOT).as_posix()
        for top in ROOMS
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert packaged - {"rankers"} <= set(RULES), sorted(packaged - set(RULES))
    assert folders <= set(RULES)


def test_only_the_training_and_run_layers_import_lightning_or_hydra():
    for path in library_files():
        room = room_of(path)
        roots = {name.split(".")[0] for name in imports(path)}
        if roots & HYDRA:
            hydra_rooms = (
                "rankers/run",
                "rankers/checkpoints",
                "rankers/tuning",
                "rankers/students",
            )
            assert room in hydra_rooms, path
        if roots & LIGHTNING:
            lightning_rooms = {"rankers/training", "rankers/run", "datamodules"}
            assert room in lightning_rooms | {"datamodules/clicks"}, path


# The one room that touches Hydra's global state: composing a config sets the caller's
# HydraConfig aside, sets its own while ${hydra:...} resolves, and puts the caller's back.
COMPOSING_ROOM = ROOT / "rankers" / "run" / "runs.py"


def test_the_library_never_reads_hydras_global_state():
    """The run layer takes the command line and the run mode as arguments (``run_task``'s
    ``overrides`` and ``multirun``), so a caller that composes its own config, or runs inside
    another ``@hydra.main`` app, gets the run it asked for; only the composing room sets
    Hydra's state aside and back."""
    for path in library_files():
        if path == COMPOSING_ROOM:
            continue
        assert not any(name.startswith("hydra.core.hydra_config") for name in imports(path)), path


def test_import_losses_pulls_in_no_framework():
    code = (
        "import sys, differank.losses\n"
        "banned = {'lightning', 'pytorch_lightning', 'hydra', 'omegaconf', 'torchmetrics',\n"
        "          'sklearn', 'scipy'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in banned))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_import_losses_does_not_load_the_compiler():
    """``torch._dynamo`` costs about 1.7 s of import time: only a program that compiles loads it
    (the hinge DP's constant mark is made then, losses/algorithms/dp_tables_constant.py)."""
    code = "import sys, differank.losses\nprint('torch._dynamo' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_differank_is_the_one_installed_import_name(tmp_path):
    """From a directory outside the project only ``differank`` imports: no top-level
    ``losses``, ``rankers``, ``datamodules``, ``train`` or ``tests``; its packages are this
    checkout's folders, reached through ``src/differank``'s links."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}

    def run(code):
        return subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    for name in ("losses", "rankers", "datamodules", "train", "tests"):
        failed = run(f"import {name}")
        assert f"No module named '{name}'" in failed.stderr, (name, failed.stderr)
    located = run(
        "import importlib.util as u\n"
        "names = ('differank.losses', 'differank.rankers', 'differank.datamodules')\n"
        "print(*(u.find_spec(name).origin for name in names))"
    )
    assert [Path(origin).resolve() for origin in located.stdout.split()] == [
        ROOT / name / "__init__.py" for name in ROOMS
    ], located.stderr


def test_src_holds_only_differank_whose_rooms_link_to_the_top_level_folders():
    """The editable install puts ``src/`` on sys.path, so it may hold nothing but ``differank``
    (and the build's ``differank.egg-info``); the links are relative, so a clone anywhere works."""
    installed = [path.name for path in (ROOT / "src").iterdir() if path.suffix != ".egg-info"]
    assert installed == ["differank"]
    for name in ROOMS:
        link = ROOT / "src" / "differank" / name
        assert link.is_symlink() and os.readlink(link) == f"../../{name}", link
        assert link.resolve() == ROOT / name


def test_the_editable_install_is_a_static_path_not_an_import_hook():
    """mypy, pyright and IDEs read ``.pth`` files that name a folder, not import hooks: the
    install's only path entry is ``src/``."""
    site_packages = Path(sysconfig.get_paths()["purelib"])
    pth = sorted(site_packages.glob("__editable__*differank*.pth"))
    assert [path.read_text().strip() for path in pth] == [str(ROOT / "src")], pth
    assert not sorted(site_packages.glob("__editable__*differank*finder*.py"))


def test_the_floors_environment_installs_exactly_the_declared_minimums():
    """constraints-floors.txt pins each dependency of pyproject.toml to its ``>=`` floor, and
    .ci/run's floors environment uses the ``requires-python`` floor."""
    tomllib = pytest.importorskip("tomllib", reason="the standard library's from Python 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {}
    for text in project["dependencies"]:
        requirement = Requirement(text)
        floors = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        assert len(floors) == 1, f"pyproject.toml: {text} needs one >= floor"
        declared[canonicalize_name(requirement.name)] = floors[0]
    pinned = {}
    for line in (ROOT / "constraints-floors.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", f"constraints-floors.txt: {line} is not an == pin"
            pinned[canonicalize_name(requirement.name)] = spec.version
    assert pinned == declared
    python_floor = project["requires-python"].removeprefix(">=")
    assert f"FLOOR_PYTHON={python_floor}\n" in (ROOT / ".ci" / "run").read_text()

"""A tree student's model file read back, under the rules of every file differank reads
(docs/serving.md#the-rules-of-the-files-written-and-read): a regular file (a FIFO, a device,
a directory or a dangling link is refused before it is opened) of at most the free memory,
whose library is told by its first bytes (LightGBM's text model starts ``tree``, XGBoost's JSON
and UBJSON models ``{``), loaded in a child process (:mod:`~differank.rankers.students.dump_child`)
so that a damaged or forged file gives a named :class:`StudentFileError` instead of ending the
process.

Public API::

    student_library(path) -> "lightgbm" | "xgboost" | None   # None: not a tree student's file
    read_student_model(path) -> StudentModel    # its trees, as its library reads them
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from differank.datamodules.reader import available_memory_bytes
from differank.datamodules.regular_files import require_regular_file
from differank.rankers.run.teachers import BoosterFileError, run_booster_child

# how a model file of each library starts
MAGIC: dict[bytes, str] = {b"tree": "lightgbm", b"{": "xgboost"}


class StudentFileError(BoosterFileError):
    """A tree student's model file that its library could not load."""

    what = "student model file"


@dataclass(frozen=True)
class StudentModel:
    """A student's model file as its library reads it: ``trees`` LightGBM's
    ``dump_model()["tree_info"]`` or XGBoost's parsed JSON dump; ``average_output`` True for a
    LightGBM random forest (trees averaged, not added)."""

    path: Path
    library: str
    num_features: int
    average_output: bool
    trees: list


def student_library(path: str | Path) -> str | None:
    """The library of the tree student's model file ``path``, told by its first bytes; None for
    anything else (a checkpoint, or a path that is not a regular file: its reader names it)."""
    path = Path(path).expanduser()
    if not path.is_file():  # stat only: a FIFO is never opened
        return None
    with path.open("rb") as file:
        start = file.read(4)
    return next((library for magic, library in MAGIC.items() if start.startswith(magic)), None)


def read_student_model(path: str | Path) -> StudentModel:
    """The trees of the student's model file ``path``, loaded by its library in a child
    process; the file is checked first (a regular file no larger than the free memory)."""
    path = Path(path).expanduser()
    require_regular_file(path, "a tree student's model file", max_bytes=available_memory_bytes())
    library = student_library(path)
    if library is None:
        raise StudentFileError(
            f"{path} is not a tree student's model file: it starts neither as LightGBM's text "
            "model ('tree') nor as XGBoost's JSON model ('{'). Give the student/model.txt or "
            "student/model.json of a student=lightgbm|xgboost run"
        )
    with tempfile.TemporaryDirectory(prefix="differank-student-") as scratch:
        trees = Path(scratch) / "trees.json"
        run_booster_child(
            "differank.rankers.students.dump_child", library, path, [str(trees)], StudentFileError
        )
        dump = json.loads(trees.read_text())
    return StudentModel(
        path, library, int(dump["num_features"]), bool(dump["average_output"]), dump["trees"]
    )

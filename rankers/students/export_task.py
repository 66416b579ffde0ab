"""``task=export`` of a tree student: ``ckpt_path`` names the student's model file
(``RUN/student/model.txt`` or ``model.json``, told from a checkpoint by its first bytes), and
``RUN/export/`` gets

* ``xgboost.json``: XGBoost's JSON dump of its trees, the ``model/xgboost+json`` definition
  of the OpenSearch and Elasticsearch learning-to-rank plugins
  (:func:`~differank.rankers.students.xgboost_dump.xgboost_json_dump`, ``split`` naming
  ``export.feature_names``, default ``feature_1 .. feature_F``);
* the library's own model: ``lightgbm.txt`` (LightGBM's text model) for a LightGBM student,
  ``xgboost_model.json`` (XGBoost's JSON model) for an XGBoost one;
* with ``export.format=opensearch``, also ``opensearch/featureset.json`` and
  ``opensearch/model.json``: the OpenSearch plugin's feature set and ``_createmodel`` body of
  type ``model/xgboost+json`` (:func:`~differank.rankers.run.opensearch.xgboost_definition`,
  ``export.name`` naming both).

The model file is read under the rules of every file read (a regular file within the free
memory, loaded in a child process) and the files are written whole or not at all. Serving them
needs LightGBM, XGBoost or the engine's plugin, and no torch.

Public API::

    export_student(model_file, run_dir, options)   # options: the run's `export` config
"""

from __future__ import annotations

import logging
from pathlib import Path

from differank.datamodules.atomic_files import write_files
from differank.rankers.run.engine_layers import check_feature_names
from differank.rankers.run.opensearch import XGBOOST, opensearch_bodies, xgboost_definition
from differank.rankers.students.model_files import read_student_model
from differank.rankers.students.xgboost_dump import dump_text, xgboost_trees

log = logging.getLogger(__name__)

# the library's own model as exported, by library
NATIVE_FILES = {"lightgbm": "lightgbm.txt", "xgboost": "xgboost_model.json"}


def export_student(model_file: str | Path, run_dir: Path, options=None) -> None:
    """Write the student's XGBoost JSON dump and its library's model under ``run_dir/export``."""
    chosen = {} if options is None else dict(options)
    formats = chosen.get("format")
    if formats not in (None, "opensearch", ["opensearch"]):
        raise ValueError(
            f"export.format={formats} exports a differank checkpoint; a tree student's model "
            f"file ({model_file}) exports as its XGBoost JSON dump and its library's model "
            "(export.format unset), and also as OpenSearch's model/xgboost+json bodies "
            "(export.format=opensearch)"
        )
    names = chosen.get("feature_names")
    model = read_student_model(model_file)
    trees = xgboost_trees(model, None if names is None else [str(name) for name in names])
    folder = run_dir / "export"
    files: dict[Path, str | bytes] = {
        folder / "xgboost.json": dump_text(trees),
        folder / NATIVE_FILES[model.library]: Path(model.path).read_bytes(),
    }
    if formats is not None:
        name = str(chosen.get("name") or "differank")
        feature_names = check_feature_names(names, model.num_features)
        definition = xgboost_definition(trees)
        files.update(
            opensearch_bodies(folder / "opensearch", name, feature_names, XGBOOST, definition)
        )
    write_files(files)
    for path in files:
        log.info("export: %s", path)

"""Tree students: gradient-boosted rankers (LightGBM, XGBoost) distilled from a differank
teacher's cached scores, and their exports (docs/objectives/distill.md#tree-students).

* :mod:`~differank.rankers.students.objective`: the distillation objective's gradient and
  hessian per document (numpy), the neural students' loss;
* :mod:`~differank.rankers.students.boosters`: the two libraries' training with it, early
  stopping on a validation metric;
* :mod:`~differank.rankers.students.fit_task`: ``student=...`` of ``task=fit``;
* :mod:`~differank.rankers.students.model_files` and
  :mod:`~differank.rankers.students.dump_child`: a student's model file read back (checked,
  loaded in a child process);
* :mod:`~differank.rankers.students.xgboost_dump`: the XGBoost JSON dump
  (``model/xgboost+json``) of either library's trees;
* :mod:`~differank.rankers.students.export_task`: ``task=export`` of a student's model file.
"""

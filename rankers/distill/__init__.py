"""Distillation's teacher side: the teachers a run may distil from
(:mod:`~differank.rankers.distill.teachers`) and their scores of each split, computed once and
cached with the data (:mod:`~differank.rankers.distill.teacher_scores`); docs/objectives/distill.md.
"""

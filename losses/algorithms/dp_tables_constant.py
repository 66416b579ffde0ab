"""The hinge DP's cached tables (:func:`~differank.losses.algorithms.ndcg_assignment.dp_tables`)
marked as a constant for ``torch.compile``, so a compiled graph never traces their construction.

A module of its own because the mark imports ``torch._dynamo`` (about 1.7 s): ``label_level_dp``
imports it only while compiling, when ``torch._dynamo`` is loaded anyway, so ``import
differank.losses`` costs no more than ``import torch`` plus the losses themselves.
"""

from __future__ import annotations

import torch

from differank.losses.algorithms.ndcg_assignment import dp_tables

torch.compiler.assume_constant_result(dp_tables)

"""The selection protocol as a product: ``differank tune`` / :func:`differank.tune`
(docs/tuning.md). One room per file:

- ``space.py``: what a row searches (conf/hparams_search/, the LightGBM/XGBoost spaces);
- ``budget.py``: the time budget (``tune.budget=30m``) and its split between rows;
- ``trials.py``: one run of one setting on one fold and seed, cached;
- ``reference.py``: LightGBM and XGBoost fitted and scored like differank's runs;
- ``search.py``: Optuna's search on validation and the chosen setting's seeds;
- ``signal.py``: what chooses (validation MAP, or held-out click sessions under
  ``ultr.select=clicks``) and what a click-chosen tune refuses;
- ``selection.py``: paired intervals against the reference and the greedy ensemble;
- ``report.py``, ``figure.py``: the tables and the forest plot;
- ``tune.py``: ``task=tune`` and :func:`tune`; ``benchmarks/protocol.py`` calls its
  :func:`run_selection`.

Optuna, and LightGBM for the reference, are needed (``pip install optuna lightgbm``; the
``bench`` and ``cluster`` extras have them).
"""

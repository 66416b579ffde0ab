"""Metrics: LETOR-exact NDCG@k, P@k and MAP (functional and as a torchmetrics `Metric`), and
the evaluator command line that scores prediction files."""

"""Full-batch solvers: fit a linear ranker on a whole training split per step (the
`FullBatchSolver` protocol), as the domination thesis and the structured SVM do."""

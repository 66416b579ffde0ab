"""Shared tensor algorithms the objectives are built from: preference pairs and label levels,
the cone fold-in's active set, the NDCG assignment (the hinge's exact inference) and the
permutation sampler of ConvexLoss. Torch only; no objective lives here."""

"""Reading, caching, normalising, grouping and batching LETOR data (never imports losses or
rankers)."""

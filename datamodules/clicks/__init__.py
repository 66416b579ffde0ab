"""Click simulation and click logs for learning to rank from clicks (docs/clicks.md)."""

"""The Lightning layer: the training modules and their callbacks (the only room that imports
Lightning)."""

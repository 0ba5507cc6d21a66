"""Examples that run: your own model and data (docs/custom-model.md)."""

"""Models: DLRM construction, training with a checkpoint cache, checkpoint import."""

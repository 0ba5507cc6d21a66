"""Reference harness for benchmarking quantized recommendation models (TorchRec + FBGEMM)."""

__version__ = "0.1.0"

"""Row encodings: the bytes of one embedding row as the in-memory backends store it.

- fp32: the row's float32 values (4·D bytes), as the eager EmbeddingBagCollection holds them.
- int8 / int4: FBGEMM's fused row-wise format as torchrec's quantized EmbeddingBagCollection stores it
  in its IntNBit TBE at CPU row alignment 1: fp16 scale and fp16 bias first, then the packed codes
  (D+4 and D/2+4 bytes). FBGEMM's quantize op returns codes first and scale/bias last, and torchrec
  moves the four bytes to the front; `encode` does the same, so the bytes equal `int8_tbe`'s and, with
  torchrec's min-max range (`backend.row_range=minmax`; uint4's default is the greedy range), `uint4`'s tables
  (tests/test_ps_redis.py compares them).
"""

from __future__ import annotations

import torch

from bench.backends.direct import SCALE_BIAS_BYTES, stored_rows

PRECISIONS = ("fp32", "int8", "int4")
BITS = {"int8": 8, "int4": 4}


def row_bytes(precision: str, dim: int) -> int:
    if precision == "fp32":
        return 4 * dim
    return dim * BITS[precision] // 8 + SCALE_BIAS_BYTES


def encode(weights: torch.Tensor, precision: str) -> torch.Tensor:
    """float32 rows [n, D] -> uint8 rows [n, row_bytes(precision, D)]: the TBE tables' own row bytes (min-max range)."""
    return stored_rows(weights.detach().float(), precision)


def decode(values: list[bytes | None], width: int) -> torch.Tensor | None:
    """Row values as Redis returns them -> uint8 rows [n, width] (view as float32 for fp32 rows).

    None when a value is missing or of another width: joined in C, checked by total length.
    """
    try:
        joined = b"".join(values)
    except TypeError:  # a None: the key is missing
        return None
    if len(joined) != len(values) * width or not values:
        return None if values else torch.empty((0, width), dtype=torch.uint8)
    return torch.frombuffer(bytearray(joined), dtype=torch.uint8).view(len(values), width)

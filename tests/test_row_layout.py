"""The rows the CUDA path gives FBGEMM's CUDA TBE kernels, checked on the CPU against what those kernels read.

FBGEMM's CUDA inference kernel (`embedding_forward_quantized_split_nbit_kernel_template.cu`) reads a table's
row `i` at byte `weights_offsets[t] + i * D_bytes`, where `D_bytes = padded_row_size_in_bytes(D, type, 16)`:
the unpadded row (fp32: 4D, fp16: 2D, INT8: D + 4, INT4: D/2 + 4, INT2: D/4 + 4 bytes) rounded up to 16. It
loads the row as 16-byte words; for INT8/INT4/INT2 the first 32-bit word is a half2 whose low half is the
scale and high half the bias, and the codes follow from the second word, each 32-bit word holding 4 / 8 / 16
codes in little-endian order (code e at bits [bits*e, bits*(e+1)) of its word; `dequantize_permuted_int*`
and the accumulators' "twiddle" put them back in that order); a value is scale * code + bias. fp16 and fp32
rows are the values themselves. The padding after a row is never read as a value.

`cuda_rows` below is that reading, written out independently of FBGEMM's Python helpers. The tests build
tables through both of the harness's paths (torchrec's quantize path for trained weights, the direct build
for random weights) with the CUDA row alignment, on the CPU, and check that (a) every row sits at the stride
the CUDA kernel uses, (b) decoded the CUDA kernel's way it gives the values FBGEMM's own dequantize op gives
for the same weights, and (c) FBGEMM's CPU kernel on those very bytes (it honours the alignment) pools the
same sums. The `cuda`-marked test runs one lookup on both devices at every row type.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from bench.backends import tbe
from bench.backends.direct import build_quantized_ebc, stored_rows
from bench.models.dlrm import build_dlrm
from bench.workloads.random_batch import random_batch, tiny_model_config, tiny_tables

CPU = torch.device("cpu")
DTYPES = ("fp32", "fp16", "int8", "int4", "int2")
BITS = {"int8": 8, "int4": 4, "int2": 2}
CUDA_ALIGNMENT = tbe.row_alignment(torch.device("cuda"))  # what the harness gives FBGEMM on CUDA
TABLES = tiny_tables(num_tables=3, rows=50, pooling=3)


def unpadded_bytes(dtype: str, dim: int) -> int:
    return {"fp32": 4 * dim, "fp16": 2 * dim, "int8": dim + 4, "int4": dim // 2 + 4, "int2": dim // 4 + 4}[dtype]


def cuda_stride(dtype: str, dim: int) -> int:
    """FBGEMM CUDA's `padded_row_size_in_bytes`: the unpadded row rounded up to 16 bytes."""
    return -(-unpadded_bytes(dtype, dim) // 16) * 16


def cuda_rows(raw: np.ndarray, dtype: str, dim: int) -> np.ndarray:
    """Rows of `raw` (uint8, [rows, stride]) read as FBGEMM's CUDA kernel reads them, as fp32 values."""
    if dtype == "fp32":
        return raw[:, : 4 * dim].copy().view(np.float32)
    if dtype == "fp16":
        return raw[:, : 2 * dim].copy().view(np.float16).astype(np.float32)
    words = raw.copy().view("<u4")  # 32-bit little-endian words
    header = words[:, :1].copy().view(np.float16)  # the half2: low half first
    scale, bias = header[:, 0].astype(np.float32), header[:, 1].astype(np.float32)
    bits = BITS[dtype]
    per_word = 32 // bits
    e = np.arange(dim)
    codes = (words[:, 1 + e // per_word] >> (bits * (e % per_word)).astype(np.uint32)) & ((1 << bits) - 1)
    return scale[:, None] * codes.astype(np.float32) + bias[:, None]


def tables_of(tbe_module) -> list[np.ndarray]:
    """Each table's raw rows from the kernel's one buffer, at the offsets FBGEMM keeps and the CUDA stride."""
    buffer = tbe_module.weights_host.numpy()
    out = []
    for t, (_, rows, dim, sparse_type, _) in enumerate(tbe_module.embedding_specs):
        dtype = {"FP32": "fp32", "FP16": "fp16", "INT8": "int8", "INT4": "int4", "INT2": "int2"}[sparse_type.name]
        start, stride = int(tbe_module.weights_offsets[t]), cuda_stride(dtype, dim)
        out.append(buffer[start: start + rows * stride].reshape(rows, stride))
    return out


def fbgemm_values(weight: torch.Tensor, dtype: str) -> np.ndarray:
    """The values FBGEMM's own ops give `weight` stored as `dtype` (its quantize-dequantize, fp16 cast or nothing)."""
    if dtype == "fp32":
        return weight.numpy()
    if dtype == "fp16":
        return weight.half().float().numpy()
    fused = torch.ops.fbgemm.FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf(weight.contiguous(), BITS[dtype])
    return torch.ops.fbgemm.FusedNBitRowwiseQuantizedSBHalfToFloat(fused, BITS[dtype]).numpy()


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_dlrm(tiny_model_config(16), TABLES, num_dense=13).eval()


def test_the_cuda_path_aligns_rows_to_16_bytes():
    assert CUDA_ALIGNMENT == 16 and tbe.row_alignment(CPU) == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_trained_tables_are_laid_out_as_the_cuda_kernel_reads_them(model, dtype):
    weights = {cfg.name: model.sparse_arch.embedding_bag_collection.embedding_bags[cfg.name].weight.detach().clone()
               for cfg in model.sparse_arch.embedding_bag_collection.embedding_bag_configs()}
    prepared = copy.deepcopy(model)
    tbe.quantize_tables(prepared, {t.name: dtype for t in TABLES}, CPU, alignment=CUDA_ALIGNMENT)
    qebc = prepared.sparse_arch.embedding_bag_collection
    kernel = qebc.tbes[0]
    assert kernel.row_alignment == CUDA_ALIGNMENT
    for (name, _, dim, _, _), raw in zip(kernel.embedding_specs, tables_of(kernel)):
        assert raw.shape[1] % 16 == 0
        np.testing.assert_array_equal(cuda_rows(raw, dtype, dim), fbgemm_values(weights[name], dtype))
    # FBGEMM's CPU kernel on the same bytes, at the same stride, pools what the CUDA reading decodes
    batch = random_batch(TABLES, 32, seed=5)
    pooled = qebc(batch.sparse).to_dict()
    for cfg, raw in zip(qebc.embedding_bag_configs(), tables_of(kernel)):
        values = cuda_rows(raw, dtype, cfg.embedding_dim)
        jt = batch.sparse[cfg.feature_names[0]]
        want = np.stack([values[ids].sum(axis=0) for ids in np.split(jt.values().numpy(), np.cumsum(jt.lengths().numpy())[:-1])])
        np.testing.assert_allclose(pooled[cfg.feature_names[0]].numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_directly_built_tables_are_laid_out_as_the_cuda_kernel_reads_them(model, dtype):
    meta = build_dlrm(tiny_model_config(16), TABLES, num_dense=13, table_device="meta")
    ebc = meta.sparse_arch.embedding_bag_collection
    qebc = build_quantized_ebc(ebc, {t.name: dtype for t in TABLES}, CPU, CUDA_ALIGNMENT, seed=7)
    kernel = qebc.tbes[0]
    for (_, rows, dim, _, _), raw in zip(kernel.embedding_specs, tables_of(kernel)):
        assert raw.shape == (rows, cuda_stride(dtype, dim))
        decoded = cuda_rows(raw, dtype, dim)
        unpadded = raw[:, : unpadded_bytes(dtype, dim)]
        # the stored bytes are FBGEMM's quantize op's, scale and bias moved to the front (stored_rows)
        assert decoded.shape == (rows, dim) and np.isfinite(decoded).all()
        assert unpadded.shape[1] == stored_rows(torch.zeros(1, dim), dtype).shape[1]
        if dtype in BITS:  # the rows' values lie between their bias and bias + scale * (2^bits - 1)
            header = raw[:, :4].copy().view(np.float16).astype(np.float32)
            assert (decoded >= header[:, 1:2] - 1e-6).all() and (decoded <= header[:, 1:2] + header[:, 0:1] * ((1 << BITS[dtype]) - 1) + 1e-3).all()


def test_the_reading_tells_a_wrong_layout_apart():
    """The oracle is not vacuous: scale and bias left at the end of the row (FBGEMM's quantize op's own
    order) decode to other values than FBGEMM's dequantize gives."""
    weight = torch.randn(8, 16)
    fused = torch.ops.fbgemm.FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf(weight, 2).numpy()
    padded = np.zeros((8, cuda_stride("int2", 16)), dtype=np.uint8)
    padded[:, : fused.shape[1]] = fused  # codes first: not what the CUDA kernel reads
    assert not np.allclose(cuda_rows(padded, "int2", 16), fbgemm_values(weight, "int2"))
    padded[:, : fused.shape[1]] = np.concatenate([fused[:, -4:], fused[:, :-4]], axis=1)  # as stored_rows lays it
    np.testing.assert_array_equal(cuda_rows(padded, "int2", 16), fbgemm_values(weight, "int2"))


BACKENDS = {"fp32": "fp32_tbe", "fp16": "fp16_tbe", "int8": "int8_tbe", "int4": "uint4", "int2": "int2_tbe"}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_lookup_agrees_on_cpu_and_cuda(model, dtype):
    """The backend's own prepare on each device (1-byte rows on CPU, 16-byte on CUDA), one lookup at every row
    type: the CUDA kernel dequantizes in fp16 where the CPU's does in fp32, nothing more may differ."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from tests.support.backends import make_backend

    batch = random_batch(TABLES, 256, seed=11)
    out = {}
    for device in (CPU, torch.device("cuda")):
        prepared = make_backend(BACKENDS[dtype], mlp="fp32").prepare(model, [], device)
        with torch.inference_mode():
            out[device.type] = prepared.sparse_arch.embedding_bag_collection(batch.sparse.to(device)).values().float().cpu()
    scale = max(out["cpu"].abs().max().item(), 1.0)
    tolerance = {"fp32": 1e-6, "fp16": 1e-3, "int8": 2e-3, "int4": 4e-3, "int2": 8e-3}[dtype]
    torch.testing.assert_close(out["cuda"], out["cpu"], rtol=0, atol=tolerance * scale)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["int8", "int4", "int2"])
def test_fbgemm_s_cuda_quantize_op_matches_its_cpu_op(model, dtype):
    """A diagnostic of torchrec's own GPU path, which quantizes on the device: FBGEMM's CUDA quantize kernel
    against its CPU op on the same weights (the harness no longer relies on the former)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for cfg in model.sparse_arch.embedding_bag_collection.embedding_bag_configs():
        weight = model.sparse_arch.embedding_bag_collection.embedding_bags[cfg.name].weight.detach()
        cpu = torch.ops.fbgemm.FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf(weight.contiguous(), BITS[dtype])
        gpu = torch.ops.fbgemm.FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf(weight.cuda().contiguous(), BITS[dtype]).cpu()
        assert (cpu != gpu).float().mean().item() < 0.01, f"{cfg.name}: the CUDA quantize op stores other bytes"

@pytest.mark.parametrize("alignment", [1, 16])
@pytest.mark.parametrize("dtype", DTYPES)
def test_trained_tables_built_for_a_gpu_hold_the_cpu_path_s_bytes(model, dtype, alignment):
    """A CUDA job's tables are its weights quantized on the CPU (build_tables_from_weights), written into the
    kernel's rows: byte for byte what torchrec's quantize path stores for a CPU job at the same alignment."""
    from bench.backends.direct import build_tables_from_weights

    dtypes = {t.name: dtype for t in TABLES}
    via_torchrec, built = copy.deepcopy(model), copy.deepcopy(model)
    tbe.quantize_tables(via_torchrec, dtypes, CPU, alignment=alignment)
    build_tables_from_weights(built, dtypes, CPU, alignment)
    tbe.check_tables(built, dtypes)
    a, b = via_torchrec.sparse_arch.embedding_bag_collection.tbes[0], built.sparse_arch.embedding_bag_collection.tbes[0]
    assert torch.equal(a.weights_host, b.weights_host) and torch.equal(a.weights_offsets, b.weights_offsets)
    batch = random_batch(TABLES, 64, seed=2)
    with torch.inference_mode():
        assert torch.equal(via_torchrec(batch.dense, batch.sparse), built(batch.dense, batch.sparse))


def test_a_gpu_job_builds_its_tables_from_the_cpu_quantized_rows(model, monkeypatch):
    """prepare() on a CUDA device takes build_tables_from_weights, never torchrec's quantize on the device (faked:
    the device is recorded, the build runs on the CPU)."""
    from bench.backends import direct
    from tests.support.backends import make_backend

    built = []

    def on_cpu(m, dtypes, device, alignment, row_range="minmax"):
        built.append((device.type, alignment))
        return direct.build_tables_from_weights(m, dtypes, CPU, alignment, row_range)

    monkeypatch.setattr(tbe, "build_tables_from_weights", on_cpu)
    monkeypatch.setattr(tbe, "quantize_tables", lambda *a, **k: pytest.fail("torchrec's quantize path ran for a GPU job"))
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: self)  # no GPU to move to
    prepared = make_backend("int2_tbe", mlp="fp32").prepare(model, [], torch.device("cuda"))
    assert built == [("cuda", 16)] and prepared.sparse_arch.embedding_bag_collection.tbes[0].row_alignment == 16

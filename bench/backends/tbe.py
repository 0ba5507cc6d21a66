"""Shared code of the table-batched-embedding backends (int8_tbe, uint4, int2_tbe, fp16_tbe, fp32_tbe).

Every eager EmbeddingBagCollection becomes torchrec's quantized EmbeddingBagCollection, and every eager
EmbeddingCollection (a sequence model's unpooled lookups) torchrec's quantized EmbeddingCollection (QEC:
the same kernel with `PoolingMode.NONE`, one row per id), whose tables run on FBGEMM's
`IntNBitTableBatchedEmbeddingBagsCodegen` kernels, through torchrec's own inference path
(`quantize_inference_model`: register the TBEs, cache the feature order, `quantize_dynamic` with a
`QuantConfig` per table and its default mapping EBC -> QEBC, EC -> QEC) on CPU; on a GPU the same module
is built with its rows quantized on the CPU
(`bench.backends.direct.build_tables_from_weights`: the same bytes as the CPU job's). Rows are aligned to 1 byte on CPU (FBGEMM's CPU default; torchrec's own
default is 16) and 16 on CUDA. The MLP then runs in fp32, fp16/bf16 (`bench.backends.half_mlp`: torchrec's
dense lowering, the default on CUDA) or int8 (the default on CPU; `bench.config.dense_path` picks the default
per device), int8 quantized by `backend.mlp_engine`: torch.ao's int8 modules on FBGEMM kernels (`torch_ao`,
`bench.backends.linear`, CPU only), or torchao's `quantize_` (`torchao`, `bench.backends.torchao_mlp`, which
also offers `mlp=int4`, int4 weight-only).

After quantizing, every table's dtype is read back from the module (`bench.backends.tables`) and
compared with the one asked for: a table left in fp32 (e.g. `quantize_dynamic` without a qconfig spec
for the EBC, or an EBC subclass the type-keyed mapping skips) fails loudly instead of being measured as
if it were quantized.

fp32 weights: fbgemm's `FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf` with bit rate 32 dies with
SIGFPE, and torchrec before 1.2 sent FP32 tables through it (pytorch/torchrec#2807). torchrec 1.8's
`quantize_state_dict` copies fp32/fp16 tables as raw bytes instead, so `fp32_tbe` works on the pinned
stack; `test_backends_contract` runs it.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Mapping, Optional, Sequence

import torch
import yaml
from fbgemm_gpu.split_embedding_configs import SparseType
from torch import nn
from torchrec.inference.modules import quantize_inference_model
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.quant.embedding_modules import quant_prep_customize_row_alignment

from bench.backends.ao_notice import torch_ao_calls
from bench.backends.backend import Backend, NotApplicable
from bench.backends.direct import ROW_RANGES, build_tables_directly, build_tables_from_weights, greedy_applies, rewrite_rows
from bench.backends.half_mlp import HALF_SCHEMES, to_half
from bench.backends.linear import MLP_CHOICES, MODES, OUTPUT_CHOICES, WIDE_RATIO, check_choice, check_wide, kept_text, quantize_int8, wide_record
from bench.backends.torchao_mlp import SCHEMES as TORCHAO_SCHEMES
from bench.backends.torchao_mlp import quantize_torchao
from bench.backends.modules import (
    on_meta,
    require_table_collections,
    table_collections,
    table_dims,
    table_rows,
    table_weights,
)
from bench.backends.tables import table_storage
from bench.batch import Batch
from bench.config import BackendConfig, dense_path
from bench.errors import UserError
from bench.metrics import DENSE_PATH

# Table weight types: the names used in configs, FBGEMM's SparseType values (as `table_storage` reports them).
WEIGHT_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "int8": torch.int8,
    "int4": torch.quint4x2,
    "int2": torch.quint2x4,
}
BITS = {name: SparseType(name).bit_rate() for name in WEIGHT_DTYPES}
ROW_RANGE = "row_range"  # the record's key: which tables' rows had the greedy range
ROW_RANGE_ATTR = "_bench_row_range"


@dataclass
class TbeConfig(BackendConfig):
    # fp32 | fp16 | bf16 | int8 (| int4 weight-only, with mlp_engine=torchao): the MLP's Linear layers. The
    # quantized backends' YAML sets it per device (bench.config.dense_path): int8 on CPU, fp16 on CUDA.
    mlp: str = "int8"
    mlp_mode: str = "dynamic"  # dynamic | static (calibrated on the calibration batches; torch_ao only); used when mlp=int8
    # The output layers (a Linear with one output: the score) with a quantized MLP: fp32 (kept in float, the
    # default) | int8 (quantized like the rest, as before this key existed); bench.backends.linear says why
    mlp_output: str = "fp32"
    # A Linear whose calibrated input range is past mlp_wide_ratio times its median column's, with an int8 MLP (torch_ao):
    # fp32 (kept in float, the default) | smooth (SmoothQuant's per-column smoothing) | int8 (like the rest, as before
    # this key existed); bench.backends.linear says why
    mlp_wide: str = "fp32"
    mlp_wide_ratio: float = WIDE_RATIO
    # Per-table weight type overrides, table name -> fp32 | fp16 | int8 | int4 | int2. On the command line
    # the keys are new to the (struct) config, hence the +: `+backend.per_table={t_cat_3: int8}`.
    per_table: dict[str, str] = field(default_factory=dict)
    # A YAML file of the same mapping (`bench.tune` writes one); `per_table` entries win over its entries.
    per_table_file: Optional[str] = None
    # Tables with fewer rows than this are stored as `small_table_dtype` instead (per_table still wins):
    # the mixed recipe keeps small tables at int8 and quantizes only the big ones further. null: off.
    small_table_rows: Optional[int] = None
    small_table_dtype: str = "int8"
    # Who quantizes the MLP: torch_ao (torch.ao.quantization's int8 modules on FBGEMM, deprecated upstream
    # but faster on CPU, see docs/torchao.md) | torchao (torchao's quantize_)
    mlp_engine: str = "torch_ao"
    # How an int4/int2 row's range is chosen: minmax (FBGEMM's quantize op, torchrec's path; the default) | greedy
    # (torch's L2-optimal search, bench.backends.direct.ROW_RANGES); int8 rows are min-max either way
    row_range: str = "minmax"

    def validate(self) -> None:
        check_config(self)


def read_per_table_file(path: str, option: str = "backend.per_table_file") -> dict[str, str]:
    """The table -> weight type mapping of a YAML file (`backend.per_table_file=`, or the `option` that named it)."""
    key = f"{option}={path!r}"
    if not Path(path).is_file():
        raise UserError(f"{key}: no such file; give the per_table.yaml that `+sweep=tune` wrote")
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{key} is not valid YAML ({type(exc).__name__}): write one `table: dtype` per line") from exc
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise UserError(f"{key} must hold a mapping of table name -> weight type, one `table: dtype` per line")
    return data


def joined_per_table(cfg) -> dict[str, str]:
    """`per_table` with a `per_table_file`'s mapping under it (`per_table` entries win), as the backend resolves it."""
    return {**read_per_table_file(cfg.per_table_file), **cfg.per_table} if cfg.per_table_file else dict(cfg.per_table)


ENGINES = ("torch_ao", "torchao")


def check_config(cfg) -> None:
    """The choices of a TBE backend config (the schema, or its composed DictConfig), before anything is built."""
    check_choice(cfg.mlp_engine, ENGINES, "backend.mlp_engine")
    if cfg.mlp_engine == "torchao":
        check_choice(cfg.mlp, ("fp32", *HALF_SCHEMES, *TORCHAO_SCHEMES), "backend.mlp")
        if cfg.mlp in TORCHAO_SCHEMES and cfg.mlp_mode != "dynamic":
            raise UserError(f"backend.mlp_mode={cfg.mlp_mode!r}: the torchao engine quantizes activations per call only; "
                            "set backend.mlp_mode=dynamic or backend.mlp_engine=torch_ao")
    elif cfg.mlp not in MLP_CHOICES and cfg.mlp in TORCHAO_SCHEMES:
        raise UserError(f"backend.mlp={cfg.mlp!r} needs backend.mlp_engine=torchao")
    check_choice(cfg.mlp, MLP_CHOICES + HALF_SCHEMES + TORCHAO_SCHEMES, "backend.mlp")
    check_choice(cfg.mlp_mode, MODES, "backend.mlp_mode")
    check_choice(cfg.mlp_output, OUTPUT_CHOICES, "backend.mlp_output")
    check_wide(cfg)
    check_choice(cfg.row_range, ROW_RANGES, "backend.row_range")
    for name, dtype in cfg.per_table.items():
        check_dtype(dtype, f"backend.per_table.{name}")


def dense_path_text(cfg) -> str:
    """The dense layers' path of a TBE backend config, as the record and the report name it."""
    if cfg.mlp == "fp32":
        return "fp32"
    if cfg.mlp in HALF_SCHEMES:
        return f"{cfg.mlp} (torchrec's dense lowering)"
    if cfg.mlp_engine == "torchao":
        return f"{cfg.mlp} (torchao)"
    return f"int8 {cfg.mlp_mode} (torch.ao)"


def check_dtype(dtype: str, key: str) -> None:
    if dtype not in WEIGHT_DTYPES:
        raise UserError(f"{key}={dtype!r} is not a table weight type: choose one of {', '.join(WEIGHT_DTYPES)}")


def resolve_table_bits(dims: dict[str, int], default_bits: int, per_table: dict[str, int], key: str) -> dict[str, int]:
    """Bits of every table: the default, overridden per table; unknown tables and unpackable dims are errors."""
    unknown = sorted(set(per_table) - set(dims))
    if unknown:
        raise UserError(f"{key} names unknown tables {unknown}: the model's tables are {sorted(dims)}")
    bits = {name: int(per_table.get(name, default_bits)) for name in dims}
    for name, b in bits.items():
        if (dims[name] * b) % 8:
            raise UserError(f"table {name!r}: dim {dims[name]} at {b} bits does not pack into whole bytes")
    return bits


def check_tables(module: nn.Module, expected: dict[str, str]) -> None:
    """Raise if any table's stored dtype is not the expected one (e.g. silently left in fp32)."""
    stored = table_storage(module)
    got = {name: stored.get(name, {}).get("dtype", "missing") for name in expected}
    wrong = {name: dtype for name, dtype in got.items() if dtype != expected[name]}
    if wrong:
        raise RuntimeError(f"embedding tables not stored as asked: {wrong} (expected {expected})")


def row_alignment(device: torch.device) -> int:
    """Bytes each stored row is padded to: 1 on CPU (FBGEMM's CPU default), 16 on CUDA."""
    return 1 if device.type == "cpu" else 16


def quantize_tables(model: nn.Module, dtypes: dict[str, str], device: torch.device, alignment: Optional[int] = None) -> None:
    """Swap every EmbeddingBagCollection and EmbeddingCollection of `model` (already on `device`) for TBE tables,
    in place, their rows aligned as `device` takes them (`alignment` overrides it: a test lays CUDA's rows out on the CPU)."""
    quant_prep_customize_row_alignment(model, [EmbeddingBagCollection, EmbeddingCollection], alignment or row_alignment(device))
    with torch_ao_calls():
        quantize_inference_model(
            model,
            # every table is named, so the default dtype below only fills QuantConfig's weight slot
            per_table_weight_dtype={name: WEIGHT_DTYPES[d] for name, d in dtypes.items()},
            quantization_dtype=WEIGHT_DTYPES[next(iter(dtypes.values()))],
            output_dtype=torch.float32,
        )
    check_tables(model, dtypes)
    left = [name for name, _ in table_collections(model)]
    if left:
        raise RuntimeError(f"embedding collections left unquantized at {left}")


class TbeBackend(Backend):
    """TBE embeddings of `weight_dtype` (per-table overrides), MLP in fp32 or int8."""

    weight_dtype: ClassVar[str]

    def __init__(self, cfg) -> None:
        # The file's mapping joins `per_table` here, so every cache key built from `self.cfg` (prepared
        # module, scores) covers the file's contents, not just its path.
        if cfg.per_table_file:
            cfg = dataclasses.replace(cfg, per_table=joined_per_table(cfg))
        super().__init__(cfg)

    def unsupported_reason(self, device: torch.device) -> str | None:
        reason = super().unsupported_reason(device)
        if reason is None and self.cfg.mlp == "int8" and self.cfg.mlp_engine == "torch_ao" and device.type != "cpu":
            return (f"backend {self.cfg.name!r}: the int8 MLP (torch.ao int8 Linear) runs on CPU only; leave backend.mlp at its "
                    f"{device.type} default ({dense_path(device.type)}), or set backend.mlp=fp32 or backend.mlp_engine=torchao")
        return reason

    def _overrides(self, rows: Mapping[str, int]) -> dict[str, str]:
        """Weight types that differ from the backend's: small tables (by rows), then `per_table`."""
        small = self.cfg.small_table_rows
        by_rows = {name: self.cfg.small_table_dtype for name, n in rows.items() if small is not None and n < small}
        return {**by_rows, **self.cfg.per_table}

    def table_dtypes(self, model: nn.Module) -> dict[str, str]:
        check_dtype(self.cfg.small_table_dtype, "backend.small_table_dtype")
        for name, dtype in self.cfg.per_table.items():
            check_dtype(dtype, f"backend.per_table.{name}")
        dims = table_dims(model)
        inverse = {b: d for d, b in BITS.items()}
        overrides = {name: BITS[d] for name, d in self._overrides(table_rows(model)).items()}
        bits = resolve_table_bits(dims, BITS[self.weight_dtype], overrides, "backend.per_table")
        return {name: inverse[b] for name, b in bits.items()}

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        check_config(self.cfg)
        reason = self.unsupported_reason(device)
        if reason is not None:
            raise UserError(reason)
        model = copy.deepcopy(model).eval()
        require_table_collections(model, self.cfg.name)
        dtypes = self.table_dtypes(model)
        row_range = self.cfg.row_range
        random_rows = any(on_meta(m) for m in model.modules())
        if random_rows:  # random weights: built straight into their stored form
            # min-max whatever row_range says: no accuracy is read from random rows, and the greedy search (about
            # 200 ns a value here) would take roughly 50 min on the full DLRM-v2 tables (estimated, bench.backends.direct.fused_rows)
            build_tables_directly(model, dtypes, device, row_alignment(device))
            build_tables_from_weights(model, dtypes, device, row_alignment(device), row_range)  # collections that have their rows
            check_tables(model, dtypes)
            model.to(device)
        elif device.type != "cpu":  # a GPU: rows quantized on the CPU, as the CPU jobs' (bench.backends.direct)
            build_tables_from_weights(model, dtypes, device, row_alignment(device), row_range)
            check_tables(model, dtypes)
            model.to(device)
        else:
            model.to(device)
            # greedy: torchrec's quantize path spans each row's min to max; its rows are rewritten in place from the fp32 ones
            weights = {name: w for name, (w, _) in table_weights(model).items()} if greedy_applies(dtypes.values(), row_range) else {}
            quantize_tables(model, dtypes, device)
            rewrite_rows(model, weights, dtypes, row_range)
            del weights
        if greedy_applies(dtypes.values(), row_range) and not random_rows:
            setattr(model, ROW_RANGE_ATTR, {ROW_RANGE: f"greedy ({', '.join(sorted(n for n, d in dtypes.items() if d in ('int4', 'int2')))})"})
        if self.cfg.mlp in HALF_SCHEMES:
            if to_half(model, self.cfg.mlp) == 0:
                raise NotApplicable(f"backend {self.cfg.name!r} runs the model's nn.Linear layers in {self.cfg.mlp}, and the model "
                                    "has none outside its embedding modules: set backend.mlp=fp32")
        elif self.cfg.mlp != "fp32" and self.cfg.mlp_engine == "torchao":
            quantize_torchao(model, self.cfg.mlp, self.cfg.mlp_output)
        elif self.cfg.mlp == "int8" and quantize_int8(model, self.cfg.mlp_mode, calibration_batches, device, self.cfg.mlp_output,
                                                         wide=self.cfg.mlp_wide, wide_ratio=self.cfg.mlp_wide_ratio) == 0:
            raise NotApplicable(f"backend {self.cfg.name!r} runs the model's nn.Linear layers in int8, and the model has none"
                                f"{kept_text(self.cfg)}: set backend.mlp=fp32")
        return model

    def stored_table_dtypes(self, tables: Mapping[str, int]) -> dict[str, str]:
        # a weight type that is not one leaves the default here; prepare() then names the mistake
        overrides = {k: str(v) for k, v in self._overrides(tables).items() if str(v) in WEIGHT_DTYPES}
        return {name: overrides.get(name, self.weight_dtype) for name in tables}

    def scores_depend_on_batch(self) -> bool:
        return self.cfg.mlp == "int8" and self.cfg.mlp_mode == "dynamic"

    def job_metrics(self, prepared: nn.Module) -> dict:
        return {DENSE_PATH: dense_path_text(self.cfg), **wide_record(prepared), **getattr(prepared, ROW_RANGE_ATTR, {})}

    def emulation(self) -> dict | None:
        """The `fake_quant` config that emulates this backend with fp32 kernels (None: nothing quantized)."""
        per_table = {name: BITS[d] for name, d in self.cfg.per_table.items()}
        small = self.cfg.small_table_rows is not None and BITS[self.cfg.small_table_dtype] != 32
        if BITS[self.weight_dtype] == 32 and all(b == 32 for b in per_table.values()) and not small and self.cfg.mlp == "fp32":
            return None
        if self.cfg.mlp in TORCHAO_SCHEMES and self.cfg.mlp_engine == "torchao":
            return None  # fake_quant emulates torch.ao's int8 schemes, not torchao's per-row activations
        twin = {
            "name": "fake_quant",
            "bits": BITS[self.weight_dtype],
            "per_table": per_table,
            "mlp": self.cfg.mlp,
            "activations": self.cfg.mlp_mode,
            "mlp_output": self.cfg.mlp_output,
            "mlp_wide": self.cfg.mlp_wide,
            "mlp_wide_ratio": self.cfg.mlp_wide_ratio,
            "row_range": self.cfg.row_range,
        }
        if self.cfg.mlp in HALF_SCHEMES:
            twin["activations"] = "static"  # not used by a half-precision MLP: fake_quant's default, one twin for every mlp_mode
        if self.cfg.small_table_rows is not None:
            twin.update(small_table_rows=self.cfg.small_table_rows, small_table_bits=BITS[self.cfg.small_table_dtype])
        return twin

"""The MLP side of the quantized backends: Linear+ReLU fusion, int8 Linear layers, and their QDQ twin.

Linear layers are found by walking the model (any TorchRec-style model), never by DLRM attribute
names. A Linear that a ReLU follows is fused with it, as the Intel recipe fuses Linear+ReLU: inside an
`nn.Sequential` (Linear, ReLU; torch.ao's `fuse_modules`) and inside torchrec's `Perceptron` (Linear,
then relu). The fused module is torch.ao's `LinearReLU`; the old ReLU becomes an Identity, so it is
not applied twice.

Int8 modes (CPU: torch.ao's quantized Linear runs FBGEMM int8 kernels):
- dynamic: weights int8 per-channel symmetric; each call quantizes its input per tensor from that
  batch's min/max (quint8 0..127, `reduce_range`), fp32 output.
- static: each layer is quantize -> int8 Linear(+ReLU) -> dequantize, with per-tensor input and output
  scales from the min/max over all calibration batches (MinMaxObserver, quint8 0..127).

The fake-quant twin (`fake_quantize`) wraps each layer with torch.ao's fused observer/fake-quant
modules (`FusedMovingAvgObsFakeQuantize`) for activations, set to the same ranges, so `fake_quant`
emulates `static` or `dynamic` with fp32 kernels and the same scales:
- dynamic: the fused module's observer stays on with averaging constant 1, so each call takes its own
  batch's min/max, as the dynamic int8 kernel does.
- static: the fused module only knows a moving average, which over a few calibration batches mostly
  remembers the first one; so a MinMaxObserver collects the global min/max over the calibration
  batches, as the static int8 calibration does, and it becomes the fused module's range. (A moving
  average on the int8 side would also be skewed: torch.ao's fused `LinearReLU` is an nn.Sequential, so
  prepare's observer runs twice per call there, once as a child and once as a hook; min/max does
  not mind.)
- weights: plain `FakeQuantize` around the observer the int8 modules use, see FAKE_QUANT_WEIGHT.

The output layer (`mlp_output`): a Linear with one output feature computes the score itself. Its input is
quantized per tensor, so one wide column swamps the rest: torchrec's SimpleDeepFMNN concatenates an
unbounded factorization-machine term (hundreds to thousands) with features below 10, and with that
layer in dynamic int8 every other column rounds to 0 or one step (its fp32 AUC 0.790 fell to 0.517 with
that one layer int8, and stayed 0.790 with every other layer int8). So by default (`mlp_output=fp32`)
the output layers stay fp32, as the toolkits' rule of keeping the last layer in float does;
`mlp_output=int8` quantizes them like the rest.

A wide input (`mlp_wide`): any other Linear can take one wide group of columns beside narrow ones (DIN's
attention-weighted sum of history rows beside the target row and the dense features; DLRM_Projection's
projection products). The rule reads the data, not the names: on the calibration batches, through the model as
it stands before its Linears are quantized, each quantized Linear's input range per tensor (0 included, as the
quantizer takes it) over its median column's. Past `mlp_wide_ratio` (16: the median column gets fewer than 8 of
the 127 levels; at the zoo's default shapes DIN's `top.0` reads 25 and DLRM_Projection's first over-arch Linear 19,
DLRM_DCN's 14, every other Linear below the output layers 7 or less, the built-in DLRM's top MLP 4.4), and where
that layer alone on int8-rounded operands moves the model's scores by more than WIDE_SCORE of their SD (a wide
input alone does not say the layer matters: HSTU's attention outputs at DLRMv3's shape read 37-126, yet int8 there
costs 0.0001 AUC; their score effects are 0.010 or less, DIN's `top.0` 0.159), the Linear is
- `fp32` (the default): kept in float, as the output layers are;
- `smooth`: smoothed as SmoothQuant does, input column j divided by s_j and the weight's column j multiplied by
  it, s_j = sqrt(max|X_j| / max|W_j|) (alpha 0.5; torchao's `SmoothQuantObserver` computes s from the calibrated
  max|X_j|; the fold into the weight and the division, an fp32 multiply before the layer (`ColumnScale`), are
  written here, as torchao applies it to its own tensor subclasses only), so the int8 GEMM stays;
- `int8`: quantized like the rest, as every record before the key.
fp32 is the default because it measured better: at the zoo's default shapes, int8_tbe (dynamic) on DIN cost
-0.0040 with `int8`, -0.0005 with `smooth` and -0.0003 with `fp32`; on DLRM_Projection -0.0004, -0.0016 (smoothing
moves the narrow columns' error into the weights' per-channel grid) and -0.0001.
The record names each Linear the rule touched and why (`mlp_kept_fp32` or `mlp_smoothed`).
"""

from __future__ import annotations

import os
from typing import Container, Sequence

import torch
import torch.ao.nn.intrinsic as nni
import torch.ao.nn.intrinsic.qat as nniqat
import torch.ao.nn.intrinsic.quantized.dynamic as nniqd
import torch.ao.nn.qat as nnqat
import torch.ao.nn.quantized.dynamic as nnqd
import torch.ao.quantization as tq
import torch.nn.functional as F
from torch import nn
from torchrec.modules.mlp import Perceptron

from bench.backends.ao_notice import torch_ao_calls
from bench.backends.modules import child_slots
from bench.batch import Batch
from bench.errors import UserError

MLP_CHOICES = ("fp32", "int8")
MODES = ("dynamic", "static")
OUTPUT_CHOICES = ("fp32", "int8")  # backend.mlp_output: the output layers (one output feature) in fp32 or like the rest
WIDE_CHOICES = ("fp32", "smooth", "int8")  # backend.mlp_wide: a Linear with a wide input kept fp32, smoothed, or like the rest
WIDE_RATIO = 16.0  # backend.mlp_wide_ratio's default: the input's range over its median column's past which the rule acts
# ... and only where that layer alone on int8-rounded operands moves the model's scores by more than this share of their
# SD (RMS over the calibration batches; benchmarks/scripts/wide_layers.py). Measured (fp32 models, the zoo's default
# shapes): DIN's top.0 0.159, DLRM_Projection's first over-arch Linear 0.039, HSTU's attention outputs at DLRMv3's
# shape 0.001-0.010 (their inputs' ratios 37-126, yet int8 there cost 0.0001 AUC), every other Linear 0.032 or less:
# 0.08 sits 2x from DIN's and from Projection's.
WIDE_SCORE = 0.08
SMOOTH_ALPHA = 0.5  # SmoothQuant's migration strength: s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)

# One definition of each scheme, shared by the int8 modules and their fake-quant twin.
_ACT = dict(dtype=torch.quint8, quant_min=0, quant_max=127)  # fbgemm's reduce_range: 7-bit activations
_WEIGHT = dict(dtype=torch.qint8, qscheme=torch.per_channel_symmetric, quant_min=-128, quant_max=127)

STATIC_QCONFIG = tq.QConfig(
    activation=tq.MinMaxObserver.with_args(**_ACT),
    weight=tq.PerChannelMinMaxObserver.with_args(**_WEIGHT),
)
DYNAMIC_QCONFIG = tq.QConfig(
    activation=tq.PlaceholderObserver.with_args(dtype=torch.quint8, quant_min=0, quant_max=255, is_dynamic=True),
    weight=tq.PerChannelMinMaxObserver.with_args(**_WEIGHT),
)
FAKE_QUANT_ACT = {
    "static": tq.FusedMovingAvgObsFakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, **_ACT),
    # averaging_constant=1 with the observer left on: every call uses its own batch's min/max.
    "dynamic": tq.FusedMovingAvgObsFakeQuantize.with_args(
        observer=tq.MovingAverageMinMaxObserver, averaging_constant=1.0, **_ACT
    ),
}
# Weights: torch.ao's plain FakeQuantize around the very observer the int8 modules use. The fused op
# computes its own symmetric scale, max|w|/128, where the observer (and so the int8 kernels) use
# max|w|/127.5: a fused weight fake-quant would emulate a slightly different weight grid.
FAKE_QUANT_WEIGHT = tq.FakeQuantize.with_args(observer=tq.PerChannelMinMaxObserver, ch_axis=0, **_WEIGHT)


def check_choice(value: str, choices: tuple[str, ...], key: str) -> None:
    if value not in choices:
        raise UserError(f"{key}={value!r} is not one of {', '.join(choices)}")


def check_wide(cfg) -> None:
    """backend.mlp_wide and backend.mlp_wide_ratio of an int8-MLP backend's config, as one-line UserErrors."""
    check_choice(cfg.mlp_wide, WIDE_CHOICES, "backend.mlp_wide")
    if not float(cfg.mlp_wide_ratio) >= 1:
        raise UserError(f"backend.mlp_wide_ratio={cfg.mlp_wide_ratio!r}: give a ratio of 1 or more (an input's range over its "
                        f"median column's; default {WIDE_RATIO:g})")


def kept_text(cfg) -> str:
    """What an int8-MLP backend left fp32 by its own rules, for the line of a model with nothing left to quantize."""
    kept = [rule for rule, on in (("its output layers (backend.mlp_output=fp32)", cfg.mlp_output == "fp32"),
                                  ("the Linears with a wide input (backend.mlp_wide=fp32)", cfg.mlp_wide == "fp32")) if on]
    return f" besides {' and '.join(kept)}" if kept else ""


def _is_relu(fn) -> bool:
    return fn is torch.relu or fn is F.relu or isinstance(fn, nn.ReLU)


def is_output_layer(unit: nn.Module) -> bool:
    """A Linear (or fused LinearReLU) with one output feature: it computes the score itself."""
    linear = unit[0] if isinstance(unit, nni.LinearReLU) else unit
    return isinstance(linear, nn.Linear) and linear.out_features == 1


def quantized_slots(model: nn.Module, output: str) -> list[tuple[nn.Module, str]]:
    """The Linear / LinearReLU slots to quantize, Linear+ReLU fused first: every one, less the output layers
    unless `output` is int8."""
    check_choice(output, OUTPUT_CHOICES, "backend.mlp_output")
    slots = fuse_linear_relu(model)
    return slots if output == "int8" else [(p, n) for p, n in slots if not is_output_layer(getattr(p, n))]


def fuse_linear_relu(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """Fuse every Linear that a ReLU follows (in place); return the slot of every Linear / LinearReLU."""
    for parent in list(model.modules()):
        if isinstance(parent, nn.Sequential) and not isinstance(parent, nni._FusedModule):
            items = list(parent._modules.items())
            for (name, first), (next_name, second) in zip(items, items[1:]):
                if type(first) is nn.Linear and type(second) is nn.ReLU:
                    tq.fuse_modules(parent, [name, next_name], inplace=True)  # LinearReLU, then Identity
        elif isinstance(parent, Perceptron) and type(parent._linear) is nn.Linear and _is_relu(parent._activation_fn):
            # by hand: the activation is a function by default (torch.relu), which fuse_modules cannot take
            parent._linear = nni.LinearReLU(parent._linear, nn.ReLU())
            parent._activation_fn = nn.Identity()
    return child_slots(model, (nn.Linear, nni.LinearReLU))


@torch.no_grad()
def calibrate(model: nn.Module, batches: Sequence[Batch], device: torch.device) -> None:
    for batch in batches:
        model(*batch.to(device).model_inputs())


def _set_qconfig(unit: nn.Module, qconfig: tq.QConfig) -> None:
    for m in unit.modules():  # a fused LinearReLU and the Linear inside it, as propagate_qconfig_ does
        m.qconfig = qconfig


def _require_calibration(batches: Sequence[Batch], what: str) -> None:
    if len(batches) == 0:
        raise UserError(f"{what} needs calibration batches: set calibration_batches > 0")


class StaticInt8Unit(nn.Module):
    """quantize -> int8 Linear(+ReLU) -> dequantize: one statically quantized layer in an fp32 model."""

    def __init__(self, unit: nn.Module) -> None:
        super().__init__()
        self.quant = tq.QuantStub()
        self.unit = unit
        self.dequant = tq.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.unit(self.quant(x)))


class FakeQuantUnit(nn.Module):
    """fake-quant input -> Linear(+ReLU) with fake-quant weights -> fake-quant output (static only)."""

    def __init__(self, unit: nn.Module, activations: str) -> None:
        super().__init__()
        self.input_fq = FAKE_QUANT_ACT[activations]()
        self.unit = unit  # nnqat.Linear or nniqat.LinearReLU: weight_fake_quant inside
        self.output_fq = FAKE_QUANT_ACT[activations]() if activations == "static" else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_fq(self.unit(self.input_fq(x)))


def slot_name(model: nn.Module, parent: nn.Module, name: str) -> str:
    """The qualified name of the child `name` of `parent` inside `model` (`over_arch.model.1`)."""
    prefix = next(n for n, m in model.named_modules() if m is parent)
    return f"{prefix}.{name}" if prefix else name


# Test only: `BENCH_TEST_BAD_INT8_LAYER=<qualified name>:<factor>` multiplies that layer's int8 weight scales by
# the factor after quantization (a planted bad layer for the layer attribution's test, bench.pipeline.layers).
PLANT_ENV = "BENCH_TEST_BAD_INT8_LAYER"


class ColumnScale(nn.Module):
    """x * scale, one factor per input column: the smoothing's division (1 / s_j) before a smoothed Linear."""

    def __init__(self, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("scale", scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def _linear(unit: nn.Module) -> nn.Linear:
    return unit[0] if isinstance(unit, nni.LinearReLU) else unit


@torch.no_grad()
def input_columns(model: nn.Module, slots: list[tuple[nn.Module, str]], batches: Sequence[Batch],
                  device: torch.device) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Each slot's input over `batches` through the model as it is: (per column min, per column max)."""
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(_module, args, name):
        x = args[0].detach().reshape(-1, args[0].shape[-1]).float()
        lo, hi = x.amin(0), x.amax(0)
        old = seen.get(name)
        seen[name] = (lo, hi) if old is None else (torch.minimum(old[0], lo), torch.maximum(old[1], hi))

    hooks = [getattr(p, n).register_forward_pre_hook(lambda m, a, name=slot_name(model, p, n): hook(m, a, name)) for p, n in slots]
    try:
        calibrate(model, batches, device)
    finally:
        for h in hooks:
            h.remove()
    return seen


def column_ratio(lo: torch.Tensor, hi: torch.Tensor) -> float:
    """The input's range per tensor (0 included, as the quantizer takes it) over its median column's range. Columns that
    never leave 0 (a ReLU's dead units) are left out: 0 is on every grid, so one scale costs them nothing."""
    columns = hi.clamp(min=0) - lo.clamp(max=0)
    whole = float(hi.max().clamp(min=0) - lo.min().clamp(max=0))
    live = columns[columns > 0]
    return whole / float(live.median()) if live.numel() else 1.0


def wide_inputs(model: nn.Module, slots: list[tuple[nn.Module, str]], batches: Sequence[Batch], device: torch.device,
                rule: str, ratio: float) -> tuple[list[tuple[nn.Module, str]], dict[str, str]]:
    """The `mlp_wide` rule on the slots about to be quantized (in place): each Linear whose calibrated input range is
    past `ratio` times its median column's is smoothed (`smooth`) or left out to stay fp32 (`fp32`). Returns the slots
    to quantize (a smoothed one's Linear now sits behind its ColumnScale) and {layer: why} of those it touched."""
    check_choice(rule, WIDE_CHOICES, "backend.mlp_wide")
    if rule == "int8" or not slots:
        return slots, {}
    _require_calibration(batches, f"backend.mlp_wide={rule} (it reads the Linears' input ranges)")
    ranges = input_columns(model, slots, batches, device)
    wide = {slot_name(model, p, n): column_ratio(*ranges[slot_name(model, p, n)]) for p, n in slots}
    effects = score_effects(model, [(p, n) for p, n in slots if wide[slot_name(model, p, n)] > ratio], batches, device)
    out, touched = [], {}
    for parent, name in slots:
        qualified = slot_name(model, parent, name)
        lo, hi = ranges[qualified]
        r, effect = wide[qualified], effects.get(qualified, 0.0)
        if r <= ratio or effect <= WIDE_SCORE:
            out.append((parent, name))
            continue
        why = (f"its input's range is {r:.1f}x its median column's (over backend.mlp_wide_ratio={ratio:g}): one int8 scale "
               f"per tensor leaves that column {127 / r:.1f} of 127 levels, and that layer alone in int8 moves the scores by "
               f"{effect:.3f} of their SD (over {WIDE_SCORE:g})")
        if rule == "fp32":
            touched[qualified] = f"kept fp32: {why}"
            continue
        unit = getattr(parent, name)
        linear = _linear(unit)
        x_max = torch.maximum(lo.abs(), hi.abs())
        observer = _smooth_observer(linear.weight.detach(), x_max)
        s = observer.calculate_qparams()[0].detach()
        with torch.no_grad():
            linear.weight.mul_(s)  # W[:, j] * s_j: the product (x / s) W'^T is the layer's own
        smoothed = nn.Sequential(ColumnScale((1.0 / s).to(linear.weight.device)), unit)
        setattr(parent, name, smoothed)
        out.append((smoothed, "1"))
        touched[qualified] = (f"smoothed: {why}; columns divided by s = sqrt(max|X_j| / max|W_j|), "
                              f"s from {float(s.min()):.3g} to {float(s.max()):.3g}")
    return out, touched


class _Int8Probe(nn.Module):
    """A Linear(+ReLU) computed on int8-rounded operands: its input per tensor on the activations' grid (each call's own
    range, as dynamic int8 takes it), its weight per output channel on the weights' grid; fp32 arithmetic."""

    def __init__(self, unit: nn.Module) -> None:
        super().__init__()
        self.unit = unit
        linear = _linear(unit)
        scale = (linear.weight.detach().abs().amax(1) / 127.5).clamp(min=1e-12)
        self.weight = torch.fake_quantize_per_channel_affine(linear.weight.detach(), scale, torch.zeros_like(scale, dtype=torch.int32),
                                                             0, _WEIGHT["quant_min"], _WEIGHT["quant_max"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
        scale = (hi - lo) / _ACT["quant_max"] or 1.0
        x = torch.fake_quantize_per_tensor_affine(x, scale, int(round(-lo / scale)), _ACT["quant_min"], _ACT["quant_max"])
        y = F.linear(x, self.weight, _linear(self.unit).bias)
        return torch.relu(y) if isinstance(self.unit, nni.LinearReLU) else y


@torch.no_grad()
def score_effects(model: nn.Module, slots: list[tuple[nn.Module, str]], batches: Sequence[Batch],
                  device: torch.device) -> dict[str, float]:
    """For each slot, how far the model's scores move when that layer alone runs on int8-rounded operands: the RMS of
    the change over the calibration batches, over the fp32 scores' SD (the model as the harness wraps it returns one
    score per sample)."""
    if not slots:
        return {}

    def scores() -> torch.Tensor:
        return torch.cat([model(*batch.to(device).model_inputs()).reshape(-1).float() for batch in batches])

    base = scores()
    spread = float(base.std()) or 1.0
    effects = {}
    for parent, name in slots:
        unit = getattr(parent, name)
        setattr(parent, name, _Int8Probe(unit))
        try:
            effects[slot_name(model, parent, name)] = float((scores() - base).pow(2).mean().sqrt()) / spread
        finally:
            setattr(parent, name, unit)
    return effects


def _smooth_observer(weight: torch.Tensor, x_max: torch.Tensor):
    """torchao's SmoothQuant observer, handed the calibrated per-column max|X_j| as one observed input."""
    from torchao.prototype.smoothquant.core import SmoothQuantObserver

    observer = SmoothQuantObserver(weight, alpha=SMOOTH_ALPHA)
    observer(x_max.unsqueeze(0).to(weight.device))  # max|X_j| over this one row is the calibrated max|X_j|
    return observer


# The record's key of what the rule did, per form, and where the prepared model keeps it (bench.metrics.RECORD_KEYS).
WIDE_RECORD = {"smooth": "mlp_smoothed", "fp32": "mlp_kept_fp32"}
_WIDE_ATTR = "_bench_mlp_wide"


def wide_record(model: nn.Module) -> dict[str, dict[str, str]]:
    """{record key: {layer: why}} of what the mlp_wide rule did to a prepared model (empty: nothing)."""
    return dict(getattr(model, _WIDE_ATTR, {}))


def _planted(model: nn.Module, slots: list[tuple[nn.Module, str]]) -> None:
    spec = os.environ.get(PLANT_ENV)
    if not spec:
        return
    target, _, factor = spec.rpartition(":")
    for parent, name in slots:
        if slot_name(model, parent, name) != target:
            continue
        layer = getattr(parent, name)
        layer = layer.unit if isinstance(layer, StaticInt8Unit) else layer
        q = layer.weight()
        wrong = torch._make_per_channel_quantized_tensor(q.int_repr(), q.q_per_channel_scales() * float(factor),
                                                         q.q_per_channel_zero_points(), q.q_per_channel_axis())
        layer.set_weight_bias(wrong, layer.bias())


def quantize_int8(model: nn.Module, mode: str, calibration_batches: Sequence[Batch], device: torch.device,
                  output: str = "int8", only: Container[str] | None = None, wide: str = "int8",
                  wide_ratio: float = WIDE_RATIO) -> int:
    """Make every Linear (fused with its ReLU) an int8 torch.ao module, in place, the output layers only when
    `output` is int8 (`quantized_slots`), a Linear with a wide input as `wide` says (`wide_inputs`); with `only`,
    just the layers of those qualified names (the layer attribution quantizes one at a time). Returns the count."""
    check_choice(mode, MODES, "backend.mlp_mode")
    slots = quantized_slots(model, output)
    if only is not None:
        slots = [(p, n) for p, n in slots if slot_name(model, p, n) in only]
    slots = _apply_wide(model, slots, calibration_batches, device, wide, wide_ratio)
    with torch_ao_calls():
        if mode == "dynamic":
            for parent, name in slots:
                unit = getattr(parent, name)
                _set_qconfig(unit, DYNAMIC_QCONFIG)
                qclass = nniqd.LinearReLU if isinstance(unit, nni.LinearReLU) else nnqd.Linear
                setattr(parent, name, qclass.from_float(unit))
            _planted(model, slots)
            return len(slots)
        _require_calibration(calibration_batches, "static int8 MLP")
        wrappers = []
        for parent, name in slots:
            wrapper = StaticInt8Unit(getattr(parent, name))
            wrapper.qconfig = STATIC_QCONFIG
            tq.prepare(wrapper, inplace=True)
            setattr(parent, name, wrapper)
            wrappers.append(wrapper)
        calibrate(model, calibration_batches, device)
        for wrapper in wrappers:
            tq.convert(wrapper, inplace=True)
    _planted(model, slots)
    return len(slots)


def _apply_wide(model: nn.Module, slots, batches, device, wide: str, ratio: float) -> list[tuple[nn.Module, str]]:
    slots, touched = wide_inputs(model, slots, batches, device, wide, ratio)
    if touched:
        setattr(model, _WIDE_ATTR, {WIDE_RECORD[wide]: touched})
    return slots


def fake_quantize(model: nn.Module, activations: str, calibration_batches: Sequence[Batch], device: torch.device,
                  output: str = "int8", wide: str = "int8", wide_ratio: float = WIDE_RATIO) -> int:
    """Wrap every Linear (fused with its ReLU) in fused observer/fake-quant modules, in place, the output
    layers only when `output` is int8, a Linear with a wide input as `wide` says (`wide_inputs`), as
    `quantize_int8` does."""
    check_choice(activations, MODES, "backend.activations")
    slots = _apply_wide(model, quantized_slots(model, output), calibration_batches, device, wide, wide_ratio)
    wrappers = []
    with torch_ao_calls():
        for parent, name in slots:
            unit = getattr(parent, name)
            _set_qconfig(unit, tq.QConfig(activation=FAKE_QUANT_ACT[activations], weight=FAKE_QUANT_WEIGHT))
            qat_class = nniqat.LinearReLU if isinstance(unit, nni.LinearReLU) else nnqat.Linear
            wrapper = FakeQuantUnit(qat_class.from_float(unit), activations).to(device)
            setattr(parent, name, wrapper)
            wrappers.append(wrapper)
    # Weights: observe once (exact per-channel min/max), then freeze the observer.
    weight_fqs = [w.unit.weight_fake_quant for w in wrappers]
    for w, fq in zip(wrappers, weight_fqs):
        fq.enable_observer(True)
        fq.enable_fake_quant(False)
        fq(w.unit.weight.detach())
        fq.enable_observer(False)
    if activations == "dynamic":
        _bake_weights(wrappers)
        return len(wrappers)
    # Static: global min/max of the fp32 layers' activations over the calibration batches, as the static
    # int8 calibration sees them (fake quantization off everywhere meanwhile); then freeze, switch on.
    _require_calibration(calibration_batches, "fake_quant with static activations")
    act_fqs = [fq for w in wrappers for fq in (w.input_fq, w.output_fq)]
    observers = [tq.MinMaxObserver(**_ACT).to(device) for _ in act_fqs]
    hooks = [fq.register_forward_pre_hook(lambda _m, args, obs=obs: obs(args[0])) for fq, obs in zip(act_fqs, observers)]
    for fq in act_fqs:
        fq.enable_observer(False)
        fq.enable_fake_quant(False)
    try:
        calibrate(model, calibration_batches, device)
    finally:
        for hook in hooks:
            hook.remove()
    for fq, obs in zip(act_fqs, observers):
        fq.activation_post_process.min_val.copy_(obs.min_val)
        fq.activation_post_process.max_val.copy_(obs.max_val)
    for fq in act_fqs:
        fq.enable_fake_quant(True)  # the fused op derives scale and zero point from the frozen min/max
    _bake_weights(wrappers)
    return len(wrappers)


def _bake_weights(wrappers: list[FakeQuantUnit]) -> None:
    """Store each Linear's weight fake-quantized once, at its frozen per-channel scales, and switch its weight
    fake-quant off: the weights are constant, so the result is bit for bit what quantizing them in every call
    gives, and that per-call quantization of the whole weight was 80% of an HSTU request's time."""
    for wrapper in wrappers:
        fq = wrapper.unit.weight_fake_quant
        fq.enable_fake_quant(True)
        with torch.no_grad():
            wrapper.unit.weight.copy_(fq(wrapper.unit.weight))
        fq.enable_fake_quant(False)

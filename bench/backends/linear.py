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
                  output: str = "int8", only: Container[str] | None = None) -> int:
    """Make every Linear (fused with its ReLU) an int8 torch.ao module, in place, the output layers only when
    `output` is int8 (`quantized_slots`); with `only`, just the layers of those qualified names (the layer
    attribution quantizes one at a time). Returns the count."""
    check_choice(mode, MODES, "backend.mlp_mode")
    slots = quantized_slots(model, output)
    if only is not None:
        slots = [(p, n) for p, n in slots if slot_name(model, p, n) in only]
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


def fake_quantize(model: nn.Module, activations: str, calibration_batches: Sequence[Batch], device: torch.device,
                  output: str = "int8") -> int:
    """Wrap every Linear (fused with its ReLU) in fused observer/fake-quant modules, in place, the output
    layers only when `output` is int8."""
    check_choice(activations, MODES, "backend.activations")
    slots = quantized_slots(model, output)
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

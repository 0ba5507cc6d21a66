"""The int8 MLP through torchao against torch.ao, paired: which one should the integer backends use?

For each batch size, the `int8_tbe` backend is prepared twice from the same trained model, the MLP
quantized once by torch.ao (`backend.mlp_engine=torch_ao`: FBGEMM's dynamic int8 Linear modules) and
once by torchao (`backend.mlp_engine=torchao`: `quantize_` with int8 dynamic activations and int8
weights), plus torchao's int4 weight-only scheme (`backend.mlp=int4`). The tables are the same
FBGEMM INT8 rows in all of them, so only the dense layers differ. It prints:

- the paired speedup torchao / torch.ao: ABBA rounds over the same timing batches (the harness's
  `time_paired`), the median per-round ratio with its 95% bootstrap interval;
- the paired ΔAUC torchao - torch.ao on the same eval samples (DeLong), and each one's ΔAUC against fp32;
- which operators one call ran, from a torch profiler trace written as Chrome trace JSON and read
  back (`--trace-dir`): int8 x int8 products (`aten::_int_mm`, `quantized::linear_dynamic`) or
  fp32 ones (`aten::mm`, `aten::addmm`), and whether anything dequantized a weight first.

`--compile` also times torchao's int8 MLP with each Linear layer compiled by `torch.compile` (inductor
fuses the per-call activation quantization; the harness itself runs eager modules). Compiling takes
a minute or more per layer and batch size on this machine.

    python benchmarks/scripts/torchao_mlp.py [--batch-sizes 1024 4096] [--threads 1] [--clock thread_cpu]
        [--eval-samples 131072] [--rounds 9] [--int4-rounds 3] [--trace-dir reports/torchao] [--compile]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections import Counter
from pathlib import Path

import torch

from bench import hardware, registry
from bench.backends.modules import child_slots
from bench.config.compose import compose
from bench.measure.accuracy import score
from bench.measure.environment import environment
from bench.measure.timing import time_paired
from bench.pipeline.job import backend_config
from bench.pipeline.shared import SharedWork
from bench.stats import auc, paired_auc_delta

warnings.filterwarnings("ignore")
CLOCK = {"wall": time.perf_counter_ns, "thread_cpu": time.thread_time_ns}
VARIANTS = {
    "torch.ao int8": {"name": "int8_tbe", "mlp_engine": "torch_ao"},
    "torchao int8": {"name": "int8_tbe", "mlp_engine": "torchao"},
    "torchao int4": {"name": "int8_tbe", "mlp_engine": "torchao", "mlp": "int4"},
}
PRODUCTS = {"aten::_int_mm": "int8", "quantized::linear_dynamic": "int8", "quantized::linear_relu_dynamic": "int8",
            "aten::_weight_int4pack_mm_for_cpu": "int4 weight", "aten::mm": "fp32", "aten::addmm": "fp32",
            "aten::linear": "fp32", "aten::bmm": "fp32 (interaction)"}  # fmt: skip


def traced_operators(module, inputs, path: Path) -> Counter:
    """Operator names (and counts) of one call, from a profiler trace written to `path` and read back."""
    with torch.inference_mode():
        module(*inputs)  # warm: packing and caches are not part of the call traced
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            module(*inputs)
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    return Counter(e["name"] for e in events if e.get("cat") == "cpu_op")


def compile_linears(model: torch.nn.Module) -> torch.nn.Module:
    """Each Linear layer (outside the embeddings) replaced by its `torch.compile`d self, in place."""
    for parent, name in child_slots(model, (torch.nn.Linear,)):
        setattr(parent, name, torch.compile(getattr(parent, name)))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=list(CLOCK), default="thread_cpu", help="thread_cpu needs --threads 1")
    parser.add_argument("--eval-samples", type=int, default=131072)
    parser.add_argument("--rounds", type=int, default=9, help="paired ABBA rounds, torchao int8 vs torch.ao int8")
    parser.add_argument("--int4-rounds", type=int, default=3, help="paired rounds for the (slow) int4 weight-only scheme")
    parser.add_argument("--trace-dir", type=Path, default=Path("reports/torchao"))
    parser.add_argument("--compile", action="store_true", help="also time torchao int8 with torch.compile'd Linear layers")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the workload and model")
    args = parser.parse_args()
    hardware.pin_malloc()
    hardware.set_threads(args.threads)
    args.trace_dir.mkdir(parents=True, exist_ok=True)
    env = environment()
    print(f"torch {env.get('torch')}, torchao {__import__('torchao').__version__}, fbgemm_gpu {env.get('fbgemm_gpu')}, "
          f"torchrec {env.get('torchrec')}; CPU {env.get('cpu')}; {torch.get_num_threads()} thread(s), clock {args.clock}; "
          f"load {open('/proc/loadavg').read().split()[:3]}")
    print(f"oneDNN ISA: {torch.backends.cpu.get_cpu_capability()}")

    work = SharedWork()
    cfg = compose([f"workload.eval_samples={args.eval_samples}", *args.overrides])
    workload = work.workload(cfg)
    model = work.model(cfg, workload)
    device = torch.device("cpu")
    calibration = work.split_batches(cfg, workload, "calibration")
    eval_batches = work.split_batches(cfg, workload, "eval")
    n_eval = sum(len(b) for b in eval_batches)
    prepared = {"fp32": registry.get("backend", "fp32").factory(backend_config({"name": "fp32"})).prepare(model.module, calibration, device)}
    for name, overrides in VARIANTS.items():
        prepared[name] = registry.get("backend", "int8_tbe").factory(backend_config(overrides)).prepare(model.module, calibration, device)
    scores = {name: score(m, eval_batches, device, n_eval) for name, m in prepared.items()}
    timed = {"torchao int8": args.rounds, "torchao int4": args.int4_rounds}
    if args.compile:
        prepared["torchao int8 compiled"] = compile_linears(registry.get("backend", "int8_tbe").factory(
            backend_config(VARIANTS["torchao int8"])).prepare(model.module, calibration, device))
        timed["torchao int8 compiled"] = args.rounds
    labels = scores["fp32"][0]
    print(f"\nAccuracy on {n_eval:,} eval samples (fp32 AUC {auc(labels, scores['fp32'][1]):.5f}); ΔAUC with 95% DeLong intervals")
    for name in VARIANTS:
        vs_fp32 = paired_auc_delta(labels, scores["fp32"][1], scores[name][1])
        line = f"  {name:14s} AUC {auc(labels, scores[name][1]):.5f}  vs fp32 {vs_fp32.delta:+.5f} [{vs_fp32.lo:+.5f}, {vs_fp32.hi:+.5f}]"
        if name != "torch.ao int8":
            d = paired_auc_delta(labels, scores["torch.ao int8"][1], scores[name][1])
            line += f"  vs torch.ao int8 {d.delta:+.5f} [{d.lo:+.5f}, {d.hi:+.5f}]"
        print(line)

    for bs in args.batch_sizes:
        bcfg = compose([f"workload.eval_samples={args.eval_samples}", f"batch_size={bs}", *args.overrides])
        inputs = work.timing_inputs(bcfg, workload, device)
        print(f"\nbatch {bs}: {len(inputs)} distinct timing batches")
        for name in VARIANTS:
            ops = traced_operators(prepared[name], inputs[0], args.trace_dir / f"trace_{name.replace(' ', '_').replace('.', '')}_bs{bs}.json")
            products = {op: n for op, n in sorted(ops.items()) if op in PRODUCTS}
            dequant = {op: n for op, n in ops.items() if "dequantize" in op}
            print(f"  {name:14s} products: " + ", ".join(f"{op} x{n} ({PRODUCTS[op]})" for op, n in products.items())
                  + f"; dequantize ops: {dequant or 'none'}")
        for name, rounds in timed.items():
            paired = time_paired(prepared[name], prepared["torch.ao int8"], inputs, bs, device, warmup_batches=2,
                                 trials=rounds, batches_per_trial=2, min_trial_seconds=0.5, clock=CLOCK[args.clock])
            point, lo, hi = paired.speedup()
            ref = sorted(paired.reference.trial_throughput)[len(paired.reference.trial_throughput) // 2]
            new = sorted(paired.candidate.trial_throughput)[len(paired.candidate.trial_throughput) // 2]
            print(f"  {name} / torch.ao int8: {point:.3f}x [{lo:.3f}, {hi:.3f}] over {len(paired.ratios)} rounds "
                  f"({new:,.0f} vs {ref:,.0f} samples/s); load {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()

"""What identifies a job (its config hash: resume, the history, compare) when keys are added to the schema.

A key added after records were stored changes every job's hash unless it is left out where it does not
change what the job measures. `job_identity` drops such keys where they are at the value that measures
what a record without them measured, or where they do not apply:

- `model.output_key` (a model whose forward returns a tuple or dict): null is the model's own tensor;
- `model.hstu` (model=hstu's shape): null for every other model;
- `backend.mlp_output` (the output layers of a quantized MLP): `int8` is what every record before it
  measured (each Linear int8), and with `backend.mlp=fp32` nothing is quantized. Its default, `fp32`, does
  change what an int8-MLP job measures, so such a job has a new identity: resume measures it again and the
  history starts its series anew, rather than comparing the output layer in fp32 against records that had
  it in int8.
- `backend.output_layer` (the quantizing toolkit backends' score layer: ONNX Runtime's int8 and w4, OpenVINO's int8
  and w8, Neural Compressor's int8): `int8` is what every record before it measured (the toolkit quantized that
  layer with the rest). Its default, `fp32`, changes what such a job measures, so it has a new identity. The
  backends without the key keep theirs: the fp32 runtimes quantize nothing, and `openvino_w4` always kept that
  layer fp32.
- `backend.mlp_wide` and `backend.mlp_wide_ratio` (a Linear of an int8 MLP whose calibrated input range is past the
  ratio times its median column's: smoothed, kept fp32, or quantized like the rest): `int8` is what every record
  before them measured, so a job that sets it keeps its old identity, and the ratio is then dropped too (it changes
  nothing). With an MLP that is not torch.ao's int8 (`backend.mlp` fp32, fp16, bf16, or `backend.mlp_engine=torchao`)
  the rule does not apply and both are dropped. Its default, `fp32`, changes what an int8-MLP job measures where a
  layer's input is that wide and the layer moves the scores (bench.backends.linear.WIDE_SCORE), so every such job
  has a new identity.
- `backend.symmetric` (the int4 of `onnxruntime_w4` and `openvino_w4`: without a zero point, or with one per
  group): `true` is what every record before it measured, and still the default, so a job that leaves it keeps its
  identity; `false` has its own.
- `backend.row_range` (how an int4/int2 table row's range is chosen, bench.backends.direct.ROW_RANGES): `minmax` is
  what every record before it measured (FBGEMM's quantize op, torchrec's path), and still the default, so a job
  that leaves it keeps its identity; `greedy` (the default of `uint4`, `int2_tbe` and `uint4_mixed`) has its own.
  With random weights (`model.weights=random`) the rows are min-max whatever it says, so it is dropped.
  `tune.row_range` (the same range in the tune's emulation and held-out backends): `minmax` keeps a tune's
  identity; its default, `greedy`, is a new one.
- `serve.judgments` (runs per Server target), `serve.step_late_share` (each run's size from LoadGen's early
  stopping) and the test-only `serve.test_stall_ms`: 1, null and null are what records before them
  measured (one run per target, min_query_count alone, no planted stall). Their defaults (3 and 0.3), and
  the longer `serve.max_search_s` (90 s, was 60), do change what a Server job measures: such a job has a
  new identity, so resume does not hand back a search whose every target was judged once as if it were
  the new, re-judged one.
- `serve.max_steal` (runs over that steal set aside): null is what records before the steal rule measured
  (no run set aside). Its default, 0.05, changes what a Server or Offline job measures on a host that
  steals, so such a job has a new identity; records made while the rule was a constant (before the key)
  have no key and read as null: resume measures them again rather than pass them off as judged by it.
- `serve.max_slowdown` (a Server run served slower than the host's usual pace set aside, bench.serve.pace): null
  is what records before the rule measured (no run set aside for it). Its default, 0.15, changes what a Server
  job measures on a host with slow phases, so such a job has a new identity: resume measures it again rather
  than pass off a ratio read in a slow phase as one judged by the rule.
- `serve.paired` (a Server search interleaved with fp32's): false is what records before it measured (one
  search, alone). Its default, true, changes what a Server job measures (its runs alternate with fp32's,
  and it reports the ratio), so such a job has a new identity.
- `serve.confirm_runs` (paired confirmation runs at each bracket end): 0 is what paired records before it
  measured (the ends as the searches left them; the side whose search ended first ran beside the other's
  runs without re-judging anything). Its default, 2, can overturn an end, so such a job has a new identity.
- `serve.track_rounds`, `serve.track_step`, `serve.paired_judgments` (paired tracking after the searches,
  and the runs per target of a paired search): track_rounds 0 with paired_judgments null is what paired
  records before them measured (the ratio of the two searches' max QPS, each target judged by
  serve.judgments); track_step matters only with tracking, so its default reads as absent. The defaults
  (10 rounds, 1 run per target) change what a paired job measures, so such a job has a new identity.
  serve.confirm_runs (confirmation runs at the bracket ends, then overturning) is gone: records made with
  it keep their identity, and a job now never matches them.
- `serve.min_rounds`, `serve.min_reversals`, `serve.rerun_spread` (the evidence a paired ratio needs, and its
  interval for a re-run) and the longer `serve.max_search_s` (a cap, no longer what ends the tracking): no
  legacy value, since records before them stopped tracking on seconds and gave a ratio from however few
  rounds those held. Every serving job has a new identity, so resume does not pass such a ratio off as one
  with that evidence.
- `serve.ratio_fit` (how a paired ratio is read from the tracking runs): levels is what records before it
  measured (the tracked levels' geometric mean), so those keep their identity; a job with the default fit
  (logistic) has its own, so resume never passes a levels ratio off as a fitted one.
- `backend.planted_slowdown` (testing only: a backend made slower on purpose, bench.backends.planted): null
  is what every job without it measures, so a job that leaves it keeps its identity.
- `workload.table_rows` of synthetic_seq (its item table grown past the catalogue, for the scale sweep): 0 is
  the catalogue's own table, what every synthetic_seq record before it measured (synthetic_scale's own
  `table_rows` is never 0).
- `timing.cuda_graphs`: false is what every earlier job measured (eager calls only), and still the default,
  so a job that leaves it keeps its identity and resumes from records made before the key.
- `device.huge_pages` (the tables backed with transparent huge pages): false is what every record before it
  measured (the allocator's 4 KiB pages), and still the default, so a job that leaves it keeps its identity; a
  job with huge pages has an identity of its own.
- `measure` (a top-level key: a part of a job that recommend's plan runs, its facts or its served batch times):
  null is the whole job every record before it measured, so a job that leaves it keeps its identity; `facts`
  and `served` jobs have identities of their own, never a whole job's.
"""

from __future__ import annotations

import copy
from typing import Any

LEGACY = {("model", "output_key"): None, ("model", "hstu"): None, ("backend", "mlp_output"): "int8", ("backend", "output_layer"): "int8", ("backend", "symmetric"): True,
          ("backend", "mlp_wide"): "int8",
          ("serve", "judgments"): 1,
          ("serve", "step_late_share"): None, ("serve", "test_stall_ms"): None, ("serve", "max_steal"): None, ("serve", "max_slowdown"): None,
          ("serve", "paired"): False, ("serve", "confirm_runs"): 0,
          ("serve", "track_rounds"): 0, ("serve", "track_step"): 0.04, ("serve", "paired_judgments"): None, ("serve", "ratio_fit"): "levels",
          ("timing", "cuda_graphs"): False, ("backend", "planted_slowdown"): None, ("workload", "table_rows"): 0,
          ("device", "huge_pages"): False, ("backend", "row_range"): "minmax",
          ("tune", "row_range"): "minmax"}
LEGACY_TOP = {"measure": None}  # top-level keys added after records were stored, at their legacy values


def job_identity(resolved: dict[str, Any]) -> dict[str, Any]:
    """`resolved` (a job's config as plain containers) less the added keys that do not change the job."""
    out = copy.deepcopy(resolved)
    for key, legacy in LEGACY_TOP.items():
        if key in out and out[key] == legacy:
            del out[key]
    for (group, key), legacy in LEGACY.items():
        section = out.get(group)
        if not isinstance(section, dict) or key not in section:
            continue
        if section[key] == legacy or (key == "mlp_output" and section.get("mlp", "fp32") == "fp32"):
            del section[key]
    backend = out.get("backend")
    if isinstance(backend, dict) and (out.get("model") or {}).get("weights") == "random":
        backend.pop("row_range", None)  # random rows are quantized min-max whatever it says (bench.backends.tbe)
    # ps_redis's null mlp is its twin's: int8 for integer rows
    mlp = backend.get("mlp") or ("int8" if backend.get("precision", "fp32") != "fp32" else "fp32") if isinstance(backend, dict) else None
    if isinstance(backend, dict) and (mlp != "int8" or backend.get("mlp_engine", "torch_ao") != "torch_ao" or "mlp_wide" not in backend):
        backend.pop("mlp_wide", None)  # the rule applies to torch.ao's int8 MLP only
        backend.pop("mlp_wide_ratio", None)  # and matters only where the rule acts
    return out

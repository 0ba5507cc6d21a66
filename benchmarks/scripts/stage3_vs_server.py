"""Stage 3's estimate beside LoadGen's Server max QPS, from stored records: for each backend, its paired offline
jobs (at threads=1, the recommend's sizes) and its serving records (Server max QPS, and fp32's beside it) from a
records file; its served batch times beside fp32's timed now, in this process, as recommend's `served` jobs time them (bench.routes.served), not stored.
Prints each candidate's estimate from the offline times alone and from the served times, absolute and relative
to fp32, and LoadGen's figures.

    python benchmarks/scripts/stage3_vs_server.py /work/reports-45b/records.jsonl cache_dir=/work/cache-45
        [--backends onnxruntime_int8_dynamic inc_int8_static compiled_fp32 openvino_fp32]
Overrides (key=value) go before --backends, which takes every word after it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from bench.config.compose import compose
from bench.record import RunRecord
from bench.recommend.confirm import confirmation
from bench.recommend.jobs import served_config, server_config
from bench.recommend.speed import estimate, point, timed_sizes
from bench.results.parts import served_of, why_not
from bench.runner import Session, run_job

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts' shared setup beside them (serving_setup.py)
from serving_setup import unknown_backend  # noqa: E402

COMMAND = "+sweep=recommend"


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")  # a Server search with no target inside the bound holds 0 QPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records")
    parser.add_argument("--backends", nargs="+", default=["onnxruntime_int8_dynamic", "inc_int8_static", "compiled_fp32", "openvino_fp32"])
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if unknown_backend(args.backends):
        parser.error(unknown_backend(args.backends))
    offline, served = {}, {}
    for line in open(args.records):
        d = json.loads(line)
        if d.get("status") != "ok" or (d["config"].get("threads") or 1) != 1 or d["config"].get("measure"):  # whole jobs only
            continue
        if d["config"].get("serve"):
            c = confirmation(RunRecord.from_dict(d))  # as stage 4 reads it: fp32 served alone is its own reference
            served[(d["backend"], d["batch_size"])] = (c.max_qps, c.fp32_max_qps)
        else:
            offline.setdefault(d["backend"], {})[d["batch_size"]] = RunRecord.from_dict(d)
    cfg = compose([COMMAND, *args.overrides])
    serve = server_config(cfg, cfg.recommend.batch_sizes[0], 1, cfg.slo.p99_ms).serve
    query_sizes = np.asarray(serve.pairs_quantiles, dtype=float)
    session, costs = Session(), {}
    sizes = timed_sizes(list(cfg.recommend.batch_sizes))
    for name in args.backends:
        bcfg = compose([COMMAND, *args.overrides, f"backend={name}"])
        records = [run_job(dataclasses.replace(served_config(bcfg, size, 1), resume=False), session)[0] for size in sizes]  # timed now
        times = {size: served_of(r) for size, r in zip(sizes, records)}
        why = next((why_not(r) for r in records if served_of(r) is None), None)
        times = None if why else times
        costs[name] = times
        print(f"{name:26s} served ms (candidate, fp32) by size: " + ("; ".join(f"{s}: {t.pairs:.0f} pairs {t.ms:.2f} / {t.fp32_ms:.2f}" for s, t in times.items()) if times else why))
    print(f"{'candidate':34s} {'bare est':>9s} {'x fp32':>7s} {'new est':>9s} {'x fp32':>7s} {'Server':>7s} {'fp32 Srv':>8s} {'x fp32':>7s} {'new/Srv':>7s}")
    for name in args.backends:
        points = {s: p for s, r in offline.get(name, {}).items() if (p := point(r)) is not None}
        for m in cfg.recommend.batch_sizes:
            if (name, m) not in served or not points:
                continue
            bare = estimate(points, query_sizes, m, serve.max_wait_ms / 1000, cfg.slo.p99_ms)
            new = estimate(points, query_sizes, m, serve.max_wait_ms / 1000, cfg.slo.p99_ms, costs[name])
            qps, ref = served[(name, m)]
            print(f"{name + ' bs=' + str(m):34s} {bare.qps:9.0f} {bare.relative:7.2f} {new.qps:9.0f} {new.relative:7.2f} "
                  f"{qps:7.0f} {ref:8.0f} {ratio(qps, ref):7.2f} {ratio(new.qps, qps):7.2f}")


if __name__ == "__main__":
    main()

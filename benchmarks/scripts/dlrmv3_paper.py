"""DLRMv3 at scale, from the records of `python -m bench +sweep=scale model=hstu +preset=dlrmv3`, and on paper.

Reads a scale sweep's records (records.jsonl) and prints:

1. per item-table size and precision: status (a skip's reason with the bytes it would need), bytes per row,
   the table collections' lookup time per row against the gather roofline at that row width, end-to-end
   samples/s (rows: one (request, candidate) pair each) and ms per request, peak RSS against the tables' bytes
   plus the model's dense part;
2. per precision: the item-table size at which the tables leave the last-level cache;
3. on paper: what MLPerf's 1e9-row item table needs at each precision, and what share of one request's time
   the lookups are against the dense part (the attention and the linear layers), at the preset's request
   (as measured) and at MLPerf's (16,384 history events, 2,048 candidates), both from the measured per-row
   and per-FLOP costs.

Lookup figures (bench.measure.lookups): the random-rows call is one call of uniformly drawn ids, the kernel's
rate on rows from all over the table, read for the collection that holds the item table (`random_by_collection`;
the whole call's `ns_per_random_row`, which also counts the small user table's rows, in records before it); `ns_per_id` is the model's own batches, where each of a request's
candidates carries the history, so most of its ids are repeats that hit the caches. Two floors per row: the
machine's random-row gather (bench.devices.roofline) at the stored row width alone, and that gather plus the
row's output written at the machine's write bandwidth (`Limits.lookup_ns_per_row`): each id of the random-rows
call comes back as a row dequantized to the output dtype (2,048 bytes at dim 512 in fp32, the record's
`output_bytes_per_random_row`), which is the floor an unpooled lookup is held to (docs/sequential.md). "huge
pages" is `device.huge_pages`: the tables backed with transparent huge pages, and the GB the kernel gave.

    python benchmarks/scripts/dlrmv3_paper.py REPORTS/records.jsonl [--sweep-name scale]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

PRECISION = {"int8_tbe": "INT8", "uint4": "INT4", "fp16_tbe": "FP16", "fp32_tbe": "FP32", "fp32": "FP32 (eager)"}
MLPERF_ROWS = 10**9
MLPERF_HISTORY, MLPERF_CANDIDATES = 16384, 2048
MACHINE_BYTES = 24 * 2**30


def dense_flops(history: int, candidates: int, shape: dict, dim: int, context: int = 1) -> float:
    """Matrix-product FLOPs of one request through model=hstu (bench.models.hstu): per layer the UVQK and output
    linears over every token, and the attention over the padded sequence (Q K^T and weights x V, every pair)."""
    n = context + history + candidates
    h, a, lv = shape["num_heads"], shape["attention_dim"], shape["linear_dim"]
    linear = 2 * n * dim * h * 2 * (lv + a) + 2 * n * h * lv * dim
    attention = 2 * n * n * h * a + 2 * n * n * h * lv
    return shape["num_layers"] * (linear + attention)


def mean_flops(cfg: dict) -> float:
    """The mean over the workload's history lengths (uniform in [min_history, history_length])."""
    w, m = cfg["workload"], cfg["model"]
    lengths = range(w["min_history"], w["history_length"] + 1)
    return sum(dense_flops(L, w["candidates"], m["hstu"], m["embedding_dim"]) for L in lengths) / len(lengths)


def gb(n: float) -> str:
    return f"{n / 1e9:,.2f} GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path, nargs="+")
    parser.add_argument("--sweep-name", default="scale")
    args = parser.parse_args()
    records = [json.loads(line) for path in args.records for line in path.read_text().splitlines() if line.strip()]
    records = [r for r in records if r["config"].get("sweep_name") == args.sweep_name and r["config"]["model"].get("arch") == "hstu"]
    if not records:
        raise SystemExit(f"no records of a +sweep=scale model=hstu run in {', '.join(map(str, args.records))}")
    ok = [r for r in records if r["status"] == "ok"]
    some = ok[0]
    env, cfg = some["env"], some["config"]
    llc = some["metrics"]["access"]["llc_bytes"]
    commits = sorted({r["env"]["git_sha"][:7] + (" (dirty)" if r["env"].get("git_dirty") else "") for r in ok})
    print(f"machine: {env['cpu']}, {env['cpu_count']} CPUs, LLC {llc / 2**20:.0f} MiB; commit {', '.join(commits)}; "
          f"clock {cfg['timing']['clock']}, threads {cfg['threads']}")
    w = cfg["workload"]
    print(f"request: histories of {w['min_history']}-{w['history_length']} events, {w['candidates']} candidates; "
          f"item table 512 wide (model.embedding_dim {cfg['model']['embedding_dim']})\n")

    print("| item rows | precision | status | huge pages | bytes/row | item table's lookup ns/row (random rows) | gather ns/row at its width | x gather "
          "| output bytes/row | gather + output write ns/row | x (gather + write) | ns/id (model's batches) | samples/s | ms/request "
          "| lookups ms/request | peak RSS | tables + dense | RSS / (tables + dense) | (RSS - start) / (tables + dense) |")
    print("| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    per_precision: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r["config"]["workload"]["table_rows"], list(PRECISION).index(r["backend"]) if r["backend"] in PRECISION else 9)):
        rows, name = r["config"]["workload"]["table_rows"], PRECISION.get(r["backend"], r["backend"])
        if r["status"] != "ok":
            print(f"| {rows:,} | {name} | {r['status']}: {r.get('error') or ''} |" + " |" * 16)
            continue
        m = r["metrics"]
        row_bytes = m["embedding_bytes"] / sum(m["table_rows"])
        limits = m["roofline"]["limits"]["gather_bytes_per_s"]
        width = int(round(row_bytes))
        roof = width / float(limits[str(width)]) * 1e9 if str(width) in limits else None
        look = m.get("lookups") or {}
        item = max(look.get("random_by_collection") or [{}], key=lambda c: c.get("largest_table_rows", 0))  # the item table's
        random_ns = item.get("ns_per_row") or look.get("ns_per_random_row")
        out_bytes = item.get("output_bytes_per_row") or look.get("output_bytes_per_random_row")
        write = m["roofline"]["limits"].get("write_bytes_per_s")
        floor = roof + out_bytes / float(write) * 1e9 if roof and out_bytes and write else None  # records before the write limit: none
        huge = m.get("huge_pages")
        huge_text = "no" if huge is None else (f"{(huge.get('huge_bytes') or 0) / 1e9:,.2f} of {huge['bytes'] / 1e9:,.2f} GB"
                                               + (f" ({huge['error']})" if huge.get("error") else ""))
        k = r["config"]["workload"]["candidates"]
        request_ms = k / m["throughput"] * 1e3
        lookup_ms = look.get("seconds_per_call", 0) * 1e3
        dense = m["model_bytes"] - m["embedding_bytes"]
        need = m["embedding_bytes"] + dense
        row = dict(rows=rows, row_bytes=row_bytes, random_ns=random_ns, roof=roof, request_ms=request_ms, lookup_ms=lookup_ms,
                   cfg=r["config"], throughput=m["throughput"], rss=m["peak_rss_bytes"], need=need)
        per_precision[name].append(row)
        print(f"| {rows:,} | {name} | ok | {huge_text} | {row_bytes:,.0f} | {random_ns:,.1f} | {roof:,.1f} | {random_ns / roof:,.1f} | "
              f"{out_bytes or float('nan'):,.0f} | {floor or float('nan'):,.1f} | {random_ns / floor if floor else float('nan'):,.2f} | "
              f"{look.get('ns_per_id', float('nan')):,.1f} | {m['throughput']:,.0f} | "
              f"{request_ms:,.1f} | {lookup_ms:,.2f} | {gb(m['peak_rss_bytes'])} | {gb(need)} | {m['peak_rss_bytes'] / need:.2f} | "
              f"{(m['peak_rss_bytes'] - m['rss_start_bytes']) / need:.2f} |")

    print("\nWhere the item table leaves the last-level cache (LLC / bytes per row):\n")
    for name, rows in per_precision.items():
        print(f"- {name}: {llc / rows[0]['row_bytes']:,.0f} rows ({rows[0]['row_bytes']:,.0f} bytes a row); "
              f"largest measured {max(x['rows'] for x in rows):,} rows = {max(x['rows'] for x in rows) * rows[0]['row_bytes'] / llc:,.0f}x the LLC")

    print(f"\nOn paper: MLPerf's item table ({MLPERF_ROWS:,} rows, 512 wide)\n")
    print("| precision | bytes/row | 1e9 rows | 24 GiB machines to hold it |")
    print("| --- | ---: | ---: | ---: |")
    widths = {"FP32": 2048, "FP16": 1024, "INT8": 516, "INT4": 260}
    for name, width in widths.items():
        measured = per_precision.get(name)
        row_bytes = measured[0]["row_bytes"] if measured else width
        print(f"| {name} | {row_bytes:,.0f}{'' if measured else ' (FBGEMM row, not measured here)'} | {gb(MLPERF_ROWS * row_bytes)} | "
              f"{MLPERF_ROWS * row_bytes / MACHINE_BYTES:,.1f} |")

    print("\nOn paper: the lookups' share of one request (largest measured size of each precision)\n")
    print("| precision | request | lookups | dense (attention + linears) | lookups' share |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, rows in per_precision.items():
        big = max(rows, key=lambda x: x["rows"])
        dense_ms = big["request_ms"] - big["lookup_ms"]
        per_flop = dense_ms / mean_flops(big["cfg"])  # ms per FLOP of this machine on this model
        w = big["cfg"]["workload"]
        print(f"| {name} | preset ({w['min_history']}-{w['history_length']} events, {w['candidates']} candidates), measured | "
              f"{big['lookup_ms']:,.2f} ms | {dense_ms:,.1f} ms | {big['lookup_ms'] / big['request_ms']:.1%} |")
        m = big["cfg"]["model"]
        flops = dense_flops(MLPERF_HISTORY, MLPERF_CANDIDATES, m["hstu"], m["embedding_dim"])
        lookups_ms = (MLPERF_HISTORY + MLPERF_CANDIDATES) * big["random_ns"] / 1e6  # each row once, at the random-rows rate
        mlperf_dense = flops * per_flop
        print(f"| {name} | MLPerf ({MLPERF_HISTORY:,} events, {MLPERF_CANDIDATES:,} candidates): {flops / 1e12:,.1f} TFLOP | "
              f"{lookups_ms:,.2f} ms | {mlperf_dense / 1e3:,.1f} s | {lookups_ms / (lookups_ms + mlperf_dense):.4%} |")


if __name__ == "__main__":
    main()

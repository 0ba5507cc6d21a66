"""`python -m bench.preprocess SRC... --out DIR`: Criteo text files -> memory-mapped arrays.

Streams (bounded memory whatever the input size), resumes an interrupted run when called again
with the same arguments, and reports malformed lines with their line numbers. The layout and the
transforms are described in `bench/workloads/criteo/layout.py` and `.../criteo/preprocess.py`.

    python -m bench.preprocess train.txt --out data/kaggle --categorical first_seen --max-ind-range 0   # dlrm's numbering
    python -m bench.preprocess day_{0..23}.gz --out data/1tb --categorical hash --max-ind-range 40000000
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.errors import EXIT_HARNESS_ERROR, UserError, internal_error
from bench.config.validation import writable_folder
from bench.workloads.criteo.convert import (
    CATEGORICAL_MODES,
    PreprocessOptions,
    preprocess,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.preprocess", description=__doc__.splitlines()[0])
    p.add_argument("sources", nargs="+", help="Criteo text files (TSV or CSV, plain or .gz); day_N names keep their day")
    p.add_argument("--out", required=True, help="output folder (created; an unfinished run there is resumed)")
    p.add_argument("--categorical", choices=CATEGORICAL_MODES, default="hash", help="id mapping (default: hash; first_seen: facebookresearch/dlrm's)")
    p.add_argument(
        "--max-ind-range", type=int, default=40_000_000, help="hash modulus; cap on frequency ids; first_seen: dlrm's --max-ind-range, applied before numbering (0: none)"
    )
    p.add_argument("--frequency-threshold", type=int, default=1, help="frequency: ids seen fewer times share id 0")
    p.add_argument("--max-examples", type=int, default=10, help="malformed-line examples reported per file")
    p.add_argument("--chunk-mb", type=int, default=4, help="MB of text read per chunk and parsing worker (bounds memory)")
    p.add_argument("--workers", type=int, default=None, help="parsing worker processes (default: one per CPU, at most 8; 1: parse in this process)")
    p.add_argument("--force", action="store_true", help="discard what --out holds and start over")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = PreprocessOptions(
        categorical=args.categorical,
        max_ind_range=args.max_ind_range,
        frequency_threshold=args.frequency_threshold,
        max_examples=args.max_examples,
    )
    t0 = time.perf_counter()
    try:
        writable_folder(args.out, "--out")
        meta = preprocess(
            args.sources,
            args.out,
            options,
            chunk_bytes=args.chunk_mb << 20,
            force=args.force,
            log=lambda m: print(m, file=sys.stderr),
            workers=args.workers,
        )
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the harness itself failed: one line, exit 3
        print(f"error: the harness failed: {internal_error(exc)}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    rows = sum(p["rows"] for p in meta["parts"])
    bad = sum(p["malformed"]["count"] for p in meta["parts"])
    print(f"{args.out}: {rows} rows, {bad} malformed lines skipped, {time.perf_counter() - t0:.1f}s")
    print("num_embeddings: " + ",".join(str(n) for n in meta["num_embeddings"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`device.huge_pages`: a CPU job's tables backed with transparent huge pages (bench.hardware.back_with_huge_pages)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench import hardware
from bench.config.compose import compose
from bench.runner import job_hash

CPU = torch.device("cpu")


def test_the_tables_keep_their_bytes_and_the_whole_huge_pages_inside_them_are_asked_for():
    table = torch.randint(0, 255, (8 << 20,), dtype=torch.uint8)  # 8 MiB: three or four whole 2 MiB pages inside
    before = table.clone()
    out = hardware.back_with_huge_pages([table, table[: 1 << 20]])  # a view of the same storage is asked for once
    assert torch.equal(table, before)
    assert out["bytes"] in (3 * hardware.HUGE_PAGE, 4 * hardware.HUGE_PAGE)
    # the kernel gave them (MADV_COLLAPSE, Linux 6.1 on), or the record says which madvise it refused
    assert out["error"] or out["huge_bytes"] >= out["bytes"]


def test_a_table_smaller_than_a_huge_page_asks_for_nothing():
    assert hardware.back_with_huge_pages([torch.ones(1000, dtype=torch.uint8)]) == {"bytes": 0, "huge_bytes": 0, "error": None}


def test_a_job_without_huge_pages_keeps_the_identity_of_records_made_before_the_key():
    resolved = dataclasses.asdict(compose(["+preset=tiny"]))
    stored_before = {**resolved, "device": {k: v for k, v in resolved["device"].items() if k != "huge_pages"}}
    assert job_hash(resolved) == job_hash(stored_before)
    huge = dataclasses.asdict(compose(["+preset=tiny", "device.huge_pages=true"]))
    assert job_hash(huge) != job_hash(resolved)  # the tables in huge pages: another measurement


@pytest.mark.slow
def test_a_job_with_huge_pages_builds_its_own_tables_records_them_and_leaves_none_to_the_next_job(tiny_cfg, monkeypatch):
    """The prepared module is shared by the jobs of a sweep; one whose tables go into huge pages neither takes an
    earlier job's nor leaves its own to a later one."""
    from bench.pipeline.job import measure
    from bench.pipeline.shared import SharedWork
    from tests.support.backends import make_backend

    timing = ("timing.trials=2", "timing.max_rounds=2", "timing.batches_per_trial=2", "timing.min_trial_seconds=0", "timing.warmup_batches=1")
    shared = SharedWork()
    plain = measure(tiny_cfg(*timing), make_backend("int8_tbe"), CPU, shared)
    assert "huge_pages" not in plain and "prepared" in shared.built()  # kept for the next job of the same backend
    plain_module = shared._prepared.value
    seen = []
    original = shared.prepared
    monkeypatch.setattr(shared, "prepared", lambda *args: seen.append(original(*args)) or seen[-1])
    huge = measure(tiny_cfg(*timing, "device.huge_pages=true"), make_backend("int8_tbe"), CPU, shared)
    # its own module, built by it: the earlier job's (and its memory) stand neither in its huge pages nor in its peak RSS
    assert seen and seen[0] is not plain_module
    assert set(huge["huge_pages"]) == {"bytes", "huge_bytes", "error"}  # the tiny tables hold no whole 2 MiB page: 0 asked
    assert "prepared" not in shared.built() and "reference" not in shared.built()


@pytest.mark.slow
def test_a_huge_pages_job_that_fails_midway_leaves_no_tables_to_the_next_job(tiny_cfg, monkeypatch):
    """The tables are put in huge pages before the timing; a job that fails there still drops them."""
    from bench.pipeline import job
    from bench.pipeline.shared import SharedWork
    from tests.support.backends import make_backend

    def fail(*args, **kwargs):
        raise RuntimeError("planted: the timing failed")

    monkeypatch.setattr(job, "time_paired", fail)
    shared = SharedWork()
    with pytest.raises(RuntimeError, match="planted"):
        job.measure(tiny_cfg("device.huge_pages=true"), make_backend("int8_tbe"), CPU, shared)
    assert "prepared" not in shared.built() and "reference" not in shared.built()

import gc
from importlib.metadata import version
import math

import numpy as np
import pytest
import torch
from torch import nn

from bench.config import DeviceConfig
from bench.errors import UserError
from bench.devices import resolve
from bench.hardware import set_threads
from bench.measure.accuracy import CountMismatch, accuracy_metrics, score
from bench.measure.environment import environment
from bench.measure.memory import PeakMemory, model_bytes
from bench.measure.timing import Timing, time_module, time_paired
from bench.workloads.random_batch import random_batch, tiny_tables


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.lin = nn.Linear(13, 1)

    def forward(self, dense, sparse):
        self.calls += 1
        return self.lin(dense)


def test_timing_counts_calls_and_keeps_raw_samples():
    module = Counting()
    batch = random_batch(tiny_tables(), 64)
    timing = time_module(module, [batch.model_inputs()] * 3, 64, torch.device("cpu"), warmup_batches=2, trials=4, batches_per_trial=5)
    assert module.calls == 2 + 4 * 5
    assert len(timing.latency_ms) == 4 and all(len(t) == 5 for t in timing.latency_ms)
    assert all(x > 0 for t in timing.latency_ms for x in t)


def test_timing_statistics():
    timing = Timing(batch_size=100, latency_ms=[[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]])
    assert timing.trial_throughput == [100_000.0, 50_000.0, 25_000.0]
    assert timing.throughput == 50_000.0
    p = timing.latency_percentiles()
    assert p["p50"] == 2.0 and p["p99"] == pytest.approx(4.0)


def test_model_bytes_counts_shared_storage_once():
    lin = nn.Linear(10, 10)
    tied = nn.Sequential(lin, lin)
    assert model_bytes(lin) == (100 + 10) * 4 == model_bytes(tied)
    quant = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(64, 64)), {nn.Linear}, dtype=torch.qint8)
    assert 64 * 64 <= model_bytes(quant) < 64 * 64 * 2  # int8 weights, found inside packed params


def test_peak_memory_sees_an_allocation():
    with PeakMemory(torch.device("cpu")) as peak:
        block = np.ones(200_000_000 // 8)
        del block
    assert peak.peak_rss_bytes > 200_000_000
    assert peak.rss_scope in ("job", "process") and peak.cuda_peak_bytes is None


def test_accuracy_metrics():
    labels = np.array([0, 0, 1, 1], dtype=np.float32)
    m = accuracy_metrics(labels, np.array([-2.0, -1.0, 1.0, 2.0]))
    assert m["auc"] == 1.0 and m["n_eval"] == 4 and m["positive_rate"] == 0.5
    # NE = log loss / entropy of the base rate: predicting the base rate scores exactly 1.
    assert accuracy_metrics(labels, np.zeros(4))["ne"] == pytest.approx(1.0)


def test_single_class_eval_split_is_a_clear_error():
    with pytest.raises(UserError, match="single class .*AUC is undefined"):
        accuracy_metrics(np.zeros(10, dtype=np.float32), np.arange(10.0))


def test_non_finite_scores_are_an_error():
    with pytest.raises(FloatingPointError, match="non-finite"):
        accuracy_metrics(np.array([0, 1], dtype=np.float32), np.array([np.nan, 1.0]))


class DropsLast(nn.Module):
    """Scores one sample too few per batch: the offsets off-by-one of a public DLRM loader."""

    def forward(self, dense, sparse):
        return dense[:-1, :1]


def test_score_catches_dropped_samples():
    batches = [random_batch(tiny_tables(), 32, seed=i) for i in range(3)]
    with pytest.raises(CountMismatch, match="31 scores for a batch of 32"):
        score(DropsLast(), batches, torch.device("cpu"), expected=96)
    with pytest.raises(CountMismatch, match="expected 100"):
        score(Counting(), batches, torch.device("cpu"), expected=100)
    labels, logits = score(Counting(), batches, torch.device("cpu"), expected=96)
    assert labels.shape == logits.shape == (96,)


def test_environment_fields():
    env = environment()
    for key in ("python", "torch", "torchrec", "fbgemm_gpu", "torchao", "cpu", "threads", "gpu", "git_sha", "git_dirty", "fingerprint"):
        assert key in env
    # the installed stack, whichever of the tested ones (requirements/) this environment holds
    assert env["torchrec"] == version("torchrec") and env["torchao"] == version("torchao") and env["gpu"] is None
    assert env["fbgemm_gpu"] == version("fbgemm-gpu-cpu") and env["torch"] == torch.__version__


def test_devices_and_threads():
    assert resolve(DeviceConfig(type="cpu")) == (torch.device("cpu"), None)
    if not torch.cuda.is_available():
        assert "no CUDA device" in resolve(DeviceConfig(type="cuda"))[1]
    with pytest.raises(UserError, match="unknown device"):
        resolve(DeviceConfig(type="tpu"))
    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(UserError):
        set_threads(0)


def test_pinned_malloc_is_recorded_in_the_environment():
    from bench.hardware import malloc_settings, pin_malloc

    settings = pin_malloc()
    if settings is None:
        pytest.skip("not glibc")
    assert settings["mmap_threshold"] == 32 << 20 and malloc_settings() == settings
    assert environment()["malloc"] == settings


class FakeClock:
    """An injected clock: each model call advances it by the module's `cost_ns` (no real time passes)."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Costs(nn.Module):
    """A module whose calls 'take' `cost_ns` on the fake clock, and which records the batches it saw."""

    def __init__(self, clock: FakeClock, cost_ns) -> None:
        super().__init__()
        self.clock, self.cost_ns, self.seen = clock, cost_ns, []

    def forward(self, dense, sparse):
        self.seen.append(int(dense[0, 0]))
        self.clock.now += self.cost_ns(len(self.seen)) if callable(self.cost_ns) else self.cost_ns
        return dense[:, :1]


def numbered_inputs(n: int) -> list[tuple]:
    """n distinct batches; batch i carries i in its first dense cell."""
    return [(torch.full((4, 13), float(i)), None) for i in range(n)]


def test_short_calls_get_longer_trials():
    clock = FakeClock()
    module = Costs(clock, 2_000_000)  # 2 ms a call
    timing = time_module(module, numbered_inputs(4), 8, torch.device("cpu"), warmup_batches=1, trials=2, batches_per_trial=3,
                         min_trial_seconds=0.05, clock=clock)
    assert [len(t) for t in timing.latency_ms] == [25, 25]  # 0.05 s / 2 ms, never under batches_per_trial
    assert all(x == 2.0 for t in timing.latency_ms for x in t)
    long = time_module(Costs(clock, 100_000_000), numbered_inputs(4), 8, torch.device("cpu"), warmup_batches=1, trials=2,
                       batches_per_trial=3, min_trial_seconds=0.05, clock=clock)
    assert [len(t) for t in long.latency_ms] == [3, 3]


def test_timed_calls_walk_through_fresh_batches():
    clock = FakeClock()
    module = Costs(clock, 1_000_000)
    timing = time_module(module, numbered_inputs(10), 4, torch.device("cpu"), warmup_batches=2, trials=2, batches_per_trial=4, clock=clock)
    assert module.seen == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]  # no trial restarts at batch 0
    assert timing.distinct_batches == 10 and timing.timed_calls == 8 and timing.calls_per_batch == 0.8


def test_paired_rounds_alternate_order_over_the_same_batches():
    clock = FakeClock()
    ref, cand = Costs(clock, 2_000_000), Costs(clock, 1_000_000)  # the candidate is twice as fast
    paired = time_paired(cand, ref, numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1, trials=4,
                         batches_per_trial=2, clock=clock)
    assert paired.first == ["reference", "candidate", "candidate", "reference"]  # ABBA
    assert ref.seen[1:] == cand.seen[1:]  # both sides timed the same batches in every round
    assert ref.seen[1:4] == [1, 2, 3] and len(paired.reference.latency_ms[0]) == 2  # each half: one untimed call, then two timed
    assert paired.ratios == [2.0] * 4 and paired.speedup() == pytest.approx((2.0, 2.0, 2.0))


def _jittery(clock: FakeClock, base_ns: int, jitter: list[float]) -> Costs:
    """A module whose n-th call costs base_ns times jitter[n] (cycling)."""
    return Costs(clock, lambda n: int(base_ns * jitter[n % len(jitter)]))


def test_paired_rounds_go_on_until_the_interval_is_narrow():
    clock = FakeClock()
    # The candidate's first calls are erratic (ratios 1.0-3.0), then steady at 2x: the interval narrows.
    erratic = [1.0, 0.5, 1.0, 1.5, 0.7, 1.2, 0.9, 1.4] + [1.0] * 400
    cand, ref = Costs(clock, lambda n: int(1_000_000 * erratic[min(n, len(erratic) - 1)])), Costs(clock, 2_000_000)
    paired = time_paired(cand, ref, numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1, trials=4,
                         batches_per_trial=1, clock=clock, target_spread=0.05, max_rounds=40)
    assert paired.stopped == "target" and 4 < len(paired.ratios) < 40
    assert len(paired.ratios) % 2 == 0 and paired.first.count("reference") == paired.first.count("candidate")
    assert paired.spread <= 0.05 and paired.speedup()[0] == pytest.approx(2.0)


def test_paired_rounds_stop_at_the_bound_when_the_noise_never_settles():
    clock = FakeClock()
    cand, ref = _jittery(clock, 1_000_000, [1.0, 0.5, 1.6, 0.8, 1.3]), Costs(clock, 2_000_000)
    paired = time_paired(cand, ref, numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1, trials=4,
                         batches_per_trial=1, clock=clock, target_spread=0.05, max_rounds=12)
    assert paired.stopped == "max_rounds" and len(paired.ratios) == 12 and paired.spread > 0.05


def test_paired_rounds_stop_when_the_process_spread_dominates():
    """Rounds that agree to 1% cannot narrow an interval that carries a 3% between-process spread: stop early."""
    clock = FakeClock()
    cand, ref = _jittery(clock, 1_000_000, [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]), Costs(clock, 2_000_000)
    paired = time_paired(cand, ref, numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1, trials=6,
                         batches_per_trial=1, clock=clock, target_spread=0.05, max_rounds=48, process_sd=0.03)
    assert paired.stopped == "process" and len(paired.ratios) < 48 and paired.round_se <= 0.015
    point, lo, hi = paired.speedup()
    assert lo < point * math.exp(-1.96 * 0.03) * 1.001 and hi > point * math.exp(1.96 * 0.03) * 0.999  # the process part is in it
    alone = time_paired(cand, ref, numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1, trials=6,
                        batches_per_trial=1, clock=clock, target_spread=0.05, max_rounds=48)
    assert alone.stopped == "target" and alone.spread < paired.spread  # the same rounds alone claim a narrower interval


def test_paired_rounds_stop_once_the_interval_decides_the_verdict():
    """A clear 2x (rounds scatter by 10%) is decided after the first rounds; a speedup on the margin never is."""
    clock = FakeClock()
    cand, ref = _jittery(clock, 1_000_000, [1.0, 1.1, 0.9, 1.05, 0.95]), Costs(clock, 2_000_000)
    looked = []

    def decided(lo: float, hi: float) -> bool:
        looked.append((lo, hi))
        return lo > 1.05 or hi < 1 / 1.05

    paired = time_paired(cand, ref, numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1, trials=4,
                         batches_per_trial=1, clock=clock, target_spread=0.01, max_rounds=16, decided=decided)
    assert paired.stopped == "decided" and len(paired.ratios) == 4 and len(looked) == 1
    on_margin = _jittery(clock, 1_000_000, [1.0, 1.1, 0.9, 1.05, 0.95])
    paired = time_paired(on_margin, Costs(clock, 1_000_000), numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1,
                         trials=4, batches_per_trial=1, clock=clock, target_spread=0.01, max_rounds=16, decided=decided)
    assert paired.stopped == "max_rounds" and len(paired.ratios) == 16


def test_a_second_clock_reads_the_same_calls():
    """The calibration reads one thread's calls on its CPU time and the wall clock at once."""
    clock = FakeClock()
    cand, ref = _jittery(clock, 1_000_000, [1.0, 1.2, 0.9]), Costs(clock, 2_000_000)
    paired = time_paired(cand, ref, numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1, trials=4,
                         batches_per_trial=2, clock=clock, second_clock=lambda: 3 * clock.now)
    assert paired.second.first == paired.first and paired.second.ratios == pytest.approx(paired.ratios)
    for side in ("candidate", "reference"):
        ours, theirs = getattr(paired, side).latency_ms, getattr(paired.second, side).latency_ms
        assert [3 * x for t in ours for x in t] == pytest.approx([x for t in theirs for x in t])


def test_the_collector_is_off_while_timing_and_back_after():
    seen = []

    class Watch(nn.Module):
        def forward(self, dense, sparse):
            seen.append(gc.isenabled())
            return dense

    assert gc.isenabled()
    time_paired(Watch(), Watch(), numbered_inputs(10), 4, torch.device("cpu"), warmup_batches=1, trials=2, batches_per_trial=1)
    time_module(Watch(), numbered_inputs(10), 4, torch.device("cpu"), warmup_batches=1, trials=2, batches_per_trial=1)
    assert seen and not any(seen) and gc.isenabled()


def test_paired_rounds_are_a_fixed_count_without_a_larger_bound():
    clock = FakeClock()
    cand, ref = _jittery(clock, 1_000_000, [1.0, 0.5, 1.6]), Costs(clock, 2_000_000)
    paired = time_paired(cand, ref, numbered_inputs(100), 4, torch.device("cpu"), warmup_batches=1, trials=5,
                         batches_per_trial=1, clock=clock, target_spread=0.05, max_rounds=5)
    assert paired.stopped == "fixed" and len(paired.ratios) == 5


def test_paired_speedup_cancels_load_that_changes_between_rounds():
    """Background load that slows round r by a factor hits both halves alike: the ratio holds."""
    clock = FakeClock()
    slow = {0: 1, 1: 3, 2: 1, 3: 5, 4: 2}
    calls = {"n": 0}

    def cost(base):
        def f(_):
            rnd = max(0, calls["n"] - 2) // 6  # after one warm-up call a side: 1 untimed + 2 timed calls per half, 2 halves per round
            calls["n"] += 1
            return base * slow.get(rnd, 1)
        return f

    ref, cand = Costs(clock, 0), Costs(clock, 0)
    ref.cost_ns, cand.cost_ns = cost(3_000_000), cost(2_000_000)
    paired = time_paired(cand, ref, numbered_inputs(50), 4, torch.device("cpu"), warmup_batches=0, trials=5,
                         batches_per_trial=2, clock=clock)
    point, lo, hi = paired.speedup()
    assert point == pytest.approx(1.5) and lo == pytest.approx(1.5) and hi == pytest.approx(1.5)
    spread = np.ptp(paired.candidate.trial_throughput) / np.median(paired.candidate.trial_throughput)
    assert spread > 1  # the candidate alone swung several-fold

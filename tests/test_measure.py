import numpy as np
import pytest
import torch
from torch import nn

from bench.config import DeviceConfig
from bench.errors import UserError
from bench.hardware import resolve, set_threads
from bench.measure.accuracy import CountMismatch, accuracy_metrics, score
from bench.measure.env import environment
from bench.measure.memory import PeakMemory, model_bytes
from bench.measure.timing import Timing, time_module
from bench.testing import random_batch, tiny_tables


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
    for key in ("python", "torch", "torchrec", "fbgemm_gpu", "cpu", "threads", "gpu", "git_sha", "git_dirty", "fingerprint"):
        assert key in env
    assert env["torchrec"] == "1.8.0" and env["gpu"] is None


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


class Sleeps(nn.Module):
    def forward(self, dense, sparse):
        import time

        time.sleep(0.002)
        return dense[:, :1]


def test_short_calls_get_longer_trials():
    batch = random_batch(tiny_tables(), 8)
    timing = time_module(Sleeps(), [batch.model_inputs()], 8, torch.device("cpu"), warmup_batches=1, trials=2, batches_per_trial=3, min_trial_seconds=0.05)
    assert all(10 <= len(t) <= 26 for t in timing.latency_ms)  # ~0.05 s / 2 ms, never under batches_per_trial

"""The criteo_* workloads: real Kaggle rows end to end, split conventions, binary layouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench import registry
from bench.errors import UserError
from bench.record import RunRecord
from bench.report.markdown import malformed_lines
from bench.workloads.criteo_binary import CriteoBinary, CriteoBinaryConfig
from bench.workloads.criteo_kaggle import CriteoKaggle, CriteoKaggleConfig
from bench.workloads.criteo_multihot import (
    MLPERF_MULTI_HOT_SIZES,
    CriteoMultihot,
    CriteoMultihotConfig,
)
from bench.workloads.criteo_terabyte import CriteoTerabyte, CriteoTerabyteConfig
from tests.support import criteo_rows as generate
from tests.support.criteo_files import checksums, criteo_data_dir, sha256

DATA = criteo_data_dir()
SUMS = checksums(DATA)
HEAD = "criteo_kaggle_train_head10k.tsv"


def count(workload, split, batch_size):
    n, labels = 0, []
    for b in workload.batches(split, batch_size):
        assert b.dense.shape == (len(b), 13) and b.dense.dtype == torch.float32
        assert b.sparse.keys() == [t.feature for t in workload.tables]
        assert b.sparse.stride() == len(b)
        for t in workload.tables:
            jt = b.sparse[t.feature]
            assert jt.lengths().tolist() == [t.pooling] * len(b)
            assert int(jt.values().max()) < t.num_embeddings and int(jt.values().min()) >= 0
        n += len(b)
        labels.append(b.labels)
    return n, torch.cat(labels)


def test_registered():
    assert {"criteo_kaggle", "criteo_terabyte", "criteo_binary", "criteo_multihot"} <= set(registry.names("workload"))


@pytest.mark.skipif(HEAD not in SUMS, reason=f"real Criteo samples not found at {DATA}")
def test_kaggle_head10k_end_to_end(tmp_path):
    path = DATA / HEAD
    assert sha256(path) == SUMS[HEAD]
    w = CriteoKaggle(CriteoKaggleConfig(path=str(path)), seed=0, cache_dir=tmp_path)
    assert [t.name for t in w.tables] == [f"t_cat_{j}" for j in range(26)]
    held = 10000 // 7
    sizes = {s: w.num_samples(s) for s in ("train", "calibration", "eval")}
    assert sizes == {"train": 10000 - held, "calibration": 10000 - held, "eval": held - held // 2}
    seen = 0
    for split in ("train", "eval"):
        n, labels = count(w, split, 1000)  # 8572 and 714: the last batch is short
        assert n == sizes[split]
        seen += n
    # every row once: train + both held-out halves
    val = CriteoKaggle(CriteoKaggleConfig(path=str(path), eval_split="val"), seed=0, cache_dir=tmp_path)
    seen += count(val, "eval", 333)[0]
    assert seen == 10000
    # the file is preprocessed once into the cache and reused
    assert len(list((tmp_path / "criteo").glob("criteo_kaggle-*/meta.json"))) == 1
    w2 = CriteoKaggle(CriteoKaggleConfig(path=str(path)), seed=0, cache_dir=tmp_path)
    assert w2.describe()["layout"] == w.describe()["layout"]
    # positive rate of the head file (README: 0.2182)
    all_labels = torch.cat([count(w, "train", 4096)[1], count(w, "eval", 4096)[1], count(val, "eval", 4096)[1]])
    assert abs(float(all_labels.mean()) - 0.2182) < 1e-4


@pytest.mark.skipif(HEAD not in SUMS, reason=f"real Criteo samples not found at {DATA}")
def test_lines_that_are_not_utf8_are_counted_and_named_in_what_the_record_holds(tmp_path):
    lines = (DATA / HEAD).read_bytes().split(b"\n")[:2000]
    broken = range(3, 2000, 7)  # 286 of 2,000 lines get a byte that no UTF-8 text holds
    for i in broken:
        lines[i] = lines[i][:30] + b"\xff" + lines[i][30:]
    path = tmp_path / "re-encoded.tsv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    w = CriteoKaggle(CriteoKaggleConfig(path=str(path)), seed=0, cache_dir=tmp_path)
    info = w.describe()  # what a job stores as its record's workload_info
    assert info["malformed"] == {"count": len(broken), "by_reason": {"not UTF-8 text": len(broken)}}
    n = 2000 - len(broken)
    assert info["rows"]["train"] == n - n // 7 and info["rows"]["eval"] == n // 7 - n // 7 // 2  # only whole lines were kept
    record = RunRecord(status="ok", workload="criteo_kaggle", backend="fp32", device="cpu", batch_size=64, config={}, config_hash="h",
                       env={}, metrics={"workload_info": info})  # fmt: skip
    [line, _] = malformed_lines({("criteo_kaggle", "cpu", "fp32", 64): record}, "criteo_kaggle", "cpu")
    assert line == "Read from raw text: 286 malformed lines skipped (not UTF-8 text: 286)."


@pytest.mark.skipif(HEAD not in SUMS, reason=f"real Criteo samples not found at {DATA}")
def test_kaggle_first_seen_numbering_on_real_rows(tmp_path):
    """dlrm's Kaggle numbering on real text: split each line on tabs, an empty field is 0, the hex
    value modulo --max-ind-range, numbered per column by first appearance over the whole file."""
    path = DATA / HEAD
    modulus = 10_000_000
    w = CriteoKaggle(CriteoKaggleConfig(path=str(path), max_ind_range=modulus), seed=0, cache_dir=tmp_path)
    numbering: list[dict[int, int]] = [{} for _ in range(26)]
    expected = []
    for line in path.read_text().splitlines():
        fields = line.split("\t")[14:]
        expected.append([numbering[j].setdefault(int(x or "0", 16) % modulus, len(numbering[j])) for j, x in enumerate(fields)])
    assert [t.num_embeddings for t in w.tables] == [len(d) for d in numbering]
    got = []
    for split in ("train", "eval"):  # the train rows, then the test half of the last seventh
        for b in w.batches(split, 4096):
            got.append(torch.stack([b.sparse[t.feature].values() for t in w.tables], dim=1).numpy())
    got = np.concatenate(got)
    assert np.array_equal(got, np.array(expected)[: len(got)]) and len(got) == 10000 - (10000 // 7) // 2


def test_terabyte_trains_on_earlier_days_and_halves_the_last(tmp_path):
    for day, rows in ((0, 300), (1, 200), (23, 101)):
        generate.write_text(tmp_path / f"day_{day}{'.gz' if day == 1 else ''}", rows, seed=day)
    cfg = CriteoTerabyteConfig(path=str(tmp_path), max_ind_range=1000, calibration_samples=50)
    w = CriteoTerabyte(cfg, seed=0, cache_dir=tmp_path / "cache")
    assert w.num_samples("train") == 500 and w.num_samples("eval") == 51 and w.num_samples("calibration") == 50
    assert count(w, "train", 64)[0] == 500 and count(w, "eval", 64)[0] == 51
    val = CriteoTerabyte(CriteoTerabyteConfig(path=str(tmp_path), max_ind_range=1000, eval_split="val"), 0, tmp_path / "cache")
    assert val.num_samples("eval") == 50
    assert all(t.num_embeddings == 1000 for t in w.tables)


def test_batches_straddle_parts_and_keep_order(tmp_path):
    labels, dense, ids = generate.generated_arrays(90, seed=4)
    generate.write_dlrm_npz(tmp_path / "day_0_reordered.npz", labels[:40], dense[:40], ids[:40])
    generate.write_dlrm_npz(tmp_path / "day_1_reordered.npz", labels[40:], dense[40:], ids[40:], compressed=True)
    w = CriteoBinary(CriteoBinaryConfig(path=str(tmp_path), max_ind_range=0), 0, tmp_path / "cache")
    got = list(w.batches("train", 7))
    assert [len(b) for b in got] == [7] * 5 + [5]
    d = torch.cat([b.dense for b in got]).numpy()
    assert np.allclose(d, np.log1p(dense[:40].astype(np.float64)).astype(np.float32))
    first_table = torch.cat([b.sparse["cat_0"].values() for b in got]).numpy()
    assert np.array_equal(first_table, ids[:40, 0])
    assert w.num_samples("eval") == 25 and [t.num_embeddings for t in w.tables] == [int(m) + 1 for m in ids.max(0)]


def test_dlrm_bin_files_as_named(tmp_path):
    for split, n in (("train", 64), ("test", 20), ("val", 21)):
        generate.write_dlrm_bin(tmp_path / f"terabyte_processed_{split}.bin", *generate.generated_arrays(n, seed=n))
    w = CriteoBinary(CriteoBinaryConfig(path=str(tmp_path), max_ind_range=100), 0, tmp_path / "cache")
    assert (w.num_samples("train"), w.num_samples("eval")) == (64, 20)
    assert all(t.num_embeddings == 100 for t in w.tables)
    assert count(w, "eval", 8)[0] == 20


@pytest.mark.slow
def test_torchrec_npy_written_by_torchrec_itself(tmp_path):
    from torchrec.datasets.criteo import BinaryCriteoUtils

    src = generate.write_text(tmp_path / "day_0.tsv", 301, seed=5)
    out = tmp_path / "npy"
    out.mkdir()
    BinaryCriteoUtils.tsv_to_npys(str(src), *(str(out / f"day_0_{k}.npy") for k in ("dense", "sparse", "labels")))
    w = CriteoBinary(CriteoBinaryConfig(path=str(out), num_embeddings_per_feature=[97] * 26), 0, tmp_path / "cache")
    assert w.num_samples("eval") == 151 and w.num_samples("train") == 0
    n, labels = count(w, "eval", 50)
    assert n == 151 and np.array_equal(labels.numpy(), np.load(out / "day_0_labels.npy")[:151, 0].astype(np.float32))


def test_mlperf_multihot(tmp_path):
    sizes = [50 + j for j in range(26)]
    generate.write_mlperf_multihot(tmp_path, 23, 33, sizes, MLPERF_MULTI_HOT_SIZES)
    w = CriteoMultihot(CriteoMultihotConfig(path=str(tmp_path), num_embeddings_per_feature=sizes), 0, tmp_path / "c")
    assert [t.pooling for t in w.tables] == MLPERF_MULTI_HOT_SIZES
    assert w.num_samples("eval") == 17 and w.num_samples("calibration") == 16  # day 23 only: the other half
    assert count(w, "eval", 5)[0] == 17
    b = next(w.batches("eval", 4))
    members = np.load(tmp_path / "day_23_sparse_multi_hot.npz")
    assert np.array_equal(b.sparse["cat_20"].values().numpy(), members["20"][:4].reshape(-1))


def test_errors_are_one_line(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        CriteoKaggle(CriteoKaggleConfig(path=str(tmp_path / "nope.tsv")), 0, tmp_path).tables
    with pytest.raises(UserError, match="test or val"):
        CriteoKaggle(CriteoKaggleConfig(path="x", eval_split="dev"), 0, tmp_path)
    generate.write_text(tmp_path / "day_5", 20, seed=0)
    w = CriteoTerabyte(CriteoTerabyteConfig(path=str(tmp_path / "day_5"), max_ind_range=10), 0, tmp_path / "c")
    with pytest.raises(UserError, match="train split .* is empty"):
        next(w.batches("train", 4))

"""Streaming preprocessing: transforms, both id mappings, resuming after a kill, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.errors import UserError
from bench.preprocess import main
from bench.workloads.criteo.convert import PreprocessOptions, cache_key, preprocess
from bench.workloads.criteo.text import read_all
from tests.support.criteo_rows import write_text


@pytest.fixture(scope="module")
def day_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("days")
    return [write_text(folder / "day_0", 3000, seed=0), write_text(folder / "day_1.gz", 2000, seed=1)]


def _arrays(folder, name):
    return [np.load(folder / f"{name}.{k}.npy") for k in ("dense", "sparse", "labels")]


def test_hash_mode_transforms(day_files, tmp_path):
    meta = preprocess(day_files, tmp_path / "out", PreprocessOptions(categorical="hash", max_ind_range=1000))
    assert [p["rows"] for p in meta["parts"]] == [3000, 2000] and [p["day"] for p in meta["parts"]] == [0, 1]
    assert meta["num_embeddings"] == [1000] * 26
    dense, sparse, labels = _arrays(tmp_path / "out", "day_0")
    raw_dense, raw_sparse, raw_labels, _ = read_all(day_files[0])
    assert np.allclose(dense, np.log1p(np.maximum(raw_dense, 0)))  # negatives clamped to 0
    assert (raw_dense < 0).any() and dense.min() == 0.0
    assert np.array_equal(sparse, (raw_sparse % 1000).astype(np.int32))
    assert np.array_equal(labels, raw_labels)
    assert dense.dtype == np.float32 and sparse.dtype == np.int32 and labels.dtype == np.int8


def test_frequency_mode_shares_one_vocabulary_across_files(day_files, tmp_path):
    opts = PreprocessOptions(categorical="frequency", max_ind_range=0, frequency_threshold=3)
    meta = preprocess(day_files, tmp_path / "out", opts)
    raw = np.concatenate([read_all(f)[1] for f in day_files])
    ids = np.concatenate([_arrays(tmp_path / "out", n)[1] for n in ("day_0", "day_1")])
    for j in (0, 7, 25):
        values, counts = np.unique(raw[:, j], return_counts=True)
        kept = values[counts >= 3]
        assert meta["num_embeddings"][j] == kept.size + 1
        expected = np.where(np.isin(raw[:, j], kept), np.searchsorted(kept, raw[:, j]) + 1, 0)
        assert np.array_equal(ids[:, j], expected)
    assert not list((tmp_path / "out").glob("*sparse_raw*"))


def first_appearance_ids(raw: np.ndarray, modulus: int) -> tuple[np.ndarray, list[int]]:
    """The numbering facebookresearch/dlrm gives, written out plainly: per column a dict that gives
    each new (value % modulus) the next number, over all rows in order."""
    ids = np.empty(raw.shape, np.int64)
    sizes = []
    for j in range(raw.shape[1]):
        seen: dict[int, int] = {}
        for i, value in enumerate(raw[:, j].tolist()):
            key = value % modulus if modulus > 0 else value
            ids[i, j] = seen.setdefault(key, len(seen))
        sizes.append(len(seen))
    return ids, sizes


@pytest.mark.slow
@pytest.mark.parametrize("modulus", [0, 97])
def test_first_seen_mode_numbers_ids_as_dlrm_does(day_files, tmp_path, monkeypatch, modulus):
    monkeypatch.setattr("bench.workloads.criteo.convert.REMAP_ROWS", 777)  # first appearances across blocks
    meta = preprocess(day_files, tmp_path / "out", PreprocessOptions(categorical="first_seen", max_ind_range=modulus))
    raw = np.concatenate([read_all(f)[1] for f in day_files])
    assert (raw == 0).any()  # missing ids: the value 0, numbered like any other
    expected, sizes = first_appearance_ids(raw, modulus)
    ids = np.concatenate([_arrays(tmp_path / "out", n)[1] for n in ("day_0", "day_1")])
    assert np.array_equal(ids, expected) and meta["num_embeddings"] == sizes
    if modulus:
        assert max(sizes) <= modulus
    assert not list((tmp_path / "out").glob("*sparse_raw*"))


def test_first_seen_refuses_a_frequency_threshold():
    with pytest.raises(UserError, match="applies to categorical=frequency only"):
        PreprocessOptions(categorical="first_seen", frequency_threshold=2).validate()


@pytest.mark.slow
@pytest.mark.parametrize("categorical", ["hash", "frequency", "first_seen"])
def test_interrupted_run_resumes_to_the_same_output(day_files, tmp_path, categorical):
    opts = PreprocessOptions(categorical=categorical, max_ind_range=5000)
    preprocess(day_files, tmp_path / "clean", opts, chunk_bytes=64 << 10)
    calls = {"n": 0}

    def kill_after_a_few(name, rows):
        calls["n"] += 1
        if calls["n"] in (3, 9):
            raise KeyboardInterrupt

    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            preprocess(day_files, tmp_path / "resumed", opts, chunk_bytes=64 << 10, checkpoint_bytes=1, on_chunk=kill_after_a_few)
        assert (tmp_path / "resumed" / "progress.json").exists() and not (tmp_path / "resumed" / "meta.json").exists()
    meta = preprocess(day_files, tmp_path / "resumed", opts, chunk_bytes=64 << 10, checkpoint_bytes=1, on_chunk=kill_after_a_few)
    assert [p["rows"] for p in meta["parts"]] == [3000, 2000]
    for name in ("day_0", "day_1"):
        for a, b in zip(_arrays(tmp_path / "clean", name), _arrays(tmp_path / "resumed", name)):
            assert np.array_equal(a, b)


def test_other_options_in_the_same_folder_are_refused(day_files, tmp_path):
    preprocess(day_files[:1], tmp_path / "out", PreprocessOptions(max_ind_range=100))
    assert preprocess(day_files[:1], tmp_path / "out", PreprocessOptions(max_ind_range=100))["parts"][0]["rows"] == 3000
    with pytest.raises(UserError, match="other sources or options"):
        preprocess(day_files[:1], tmp_path / "out", PreprocessOptions(max_ind_range=200))
    assert cache_key(day_files[:1], PreprocessOptions(max_ind_range=100)) != cache_key(day_files[:1], PreprocessOptions(max_ind_range=200))
    with pytest.raises(UserError, match="categorical"):
        PreprocessOptions(categorical="bogus").validate()


def test_cli_reports_malformed_lines(tmp_path, capsys):
    src = tmp_path / "train.txt"
    write_text(src, 100, seed=3)
    src.write_bytes(src.read_bytes() + b"1\tnot\ta\trow\n")
    assert main([str(src), "--out", str(tmp_path / "out"), "--categorical", "frequency", "--max-ind-range", "0"]) == 0
    captured = capsys.readouterr()
    assert "100 rows, 1 malformed lines skipped" in captured.out
    assert "line 101: wrong field count (4, expected 40)" in captured.err
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["parts"][0]["malformed"]["examples"][0]["line"] == 101
    assert main([str(tmp_path / "missing.txt"), "--out", str(tmp_path / "x")]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("categorical", ["hash", "frequency", "first_seen"])
def test_output_does_not_depend_on_workers_or_chunk_size(day_files, tmp_path, categorical):
    opts = PreprocessOptions(categorical=categorical, max_ind_range=5000)
    runs = {}
    for workers, chunk in ((1, 1 << 20), (2, 50_000), (3, 20_000)):
        out = tmp_path / f"w{workers}"
        meta = preprocess(day_files, out, opts, chunk_bytes=chunk, workers=workers)
        runs[workers] = ({p.name: p.read_bytes() for p in sorted(out.glob("*.npy"))}, meta["parts"], meta["num_embeddings"])
    assert runs[1] == runs[2] == runs[3]


def test_hash_mode_matches_a_plain_numpy_transform_of_read_all(tmp_path):
    src = write_text(tmp_path / "day_3", 4000, seed=4)
    preprocess([src], tmp_path / "out", PreprocessOptions(max_ind_range=40_000_000), chunk_bytes=100_000, workers=2)
    raw_dense, raw_sparse, raw_labels, _ = read_all(src)
    dense, sparse, labels = _arrays(tmp_path / "out", "day_3")
    assert dense.tobytes() == np.log1p(np.maximum(raw_dense, 0).astype(np.float64)).astype(np.float32).tobytes()
    assert sparse.tobytes() == (raw_sparse % np.uint32(40_000_000)).astype(np.int32).tobytes()
    assert labels.tobytes() == raw_labels.tobytes()

"""workload=parquet: the schema mapping against real Parquet files (pyarrow writes them here), bad rows
counted by kind, ids reduced per table, the declared splits, every eval row read exactly once, and
malformed files refused before any work."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.errors import UserError
from bench.workloads.parquet import ParquetConfig, ParquetWorkload
from bench.workloads.parquet_columns import hashed
from tests.conftest import run_bench


def write(path, **columns):
    pq.write_table(pa.table(columns), path)
    return path


def workload(tmp_path, path, **cfg):
    return ParquetWorkload(ParquetConfig(path=str(path), **cfg), seed=0, cache_dir=tmp_path / "cache")


def rows_of(w, split, batch_size=7):
    """(row number from the `row` dense column, label, ids per feature) of every sample of a split."""
    out = []
    for batch in w.batches(split, batch_size):
        for i in range(len(batch)):
            ids = {k: batch.sparse[k].to_dense()[i].tolist() for k in batch.sparse.keys()}
            out.append((int(batch.dense[i, 0]), float(batch.labels[i]), ids))
    return out


@pytest.fixture
def mixed(tmp_path):
    """Every kind of column, and one bad row of each kind."""
    n = 40
    label = [i % 2 for i in range(n)]
    value = [float(i) for i in range(n)]
    user = list(range(n))
    tags = [[i, i + 1] if i % 3 else [] for i in range(n)]
    city = [f"city-{i % 5}" for i in range(n)]
    label[1], value[2], user[3], tags[4], user[5] = None, None, None, [7, None], -4
    label[6], value[7] = 2, float("nan")
    return write(tmp_path / "mixed.parquet", label=pa.array(label, pa.int64()), row=pa.array(value, pa.float64()),
                 user=pa.array(user, pa.int64()), tags=pa.array(tags, pa.list_(pa.int64())), city=city)


def test_bad_rows_are_counted_by_kind_and_dropped(tmp_path, mixed):
    w = workload(tmp_path, mixed, split="files", eval_files=["*"])
    assert w.describe()["bad_rows"]["by_kind"] == {
        "missing label": 1, "label not 0 or 1": 1, "missing dense value": 1, "non-finite dense value": 1, "missing id": 2, "negative id": 1,
    }
    kept = rows_of(w, "eval")
    assert [r[0] for r in kept] == [i for i in range(40) if i not in (1, 2, 3, 4, 5, 6, 7)]
    assert w.num_samples("eval") == len(kept) == 33


def test_schema_inferred_and_ids_reduced_per_table(tmp_path, mixed):
    w = workload(tmp_path, mixed, split="files", eval_files=["*"], table_rows={"tags": 10}, ids_per_column={"user": "hash"})
    columns = w.describe()["columns"]
    assert columns["dense"] == ["row"] and list(columns["sparse"]) == ["user", "tags", "city"]
    assert columns["sparse"]["tags"] == {"multi_hot": True, "ids": "integer", "reduction": "modulo"}
    assert columns["sparse"]["city"]["reduction"] == "hash"  # strings always
    rows = {t.feature: t.num_embeddings for t in w.tables}
    # hashed: twice the distinct ids (a negative id is an id like any other there); tags: from the config
    assert rows == {"user": 2 * 34, "tags": 10, "city": 2 * 5}
    first = {r[0]: r[2] for r in rows_of(w, "eval")}
    assert first[10]["tags"] == [0, 1]  # 10, 11 mod 10
    assert first[0]["tags"] == []  # an empty list: no ids, a zero bag
    assert first[8]["user"] == [int(hashed(pa.array([8]))[0] % 68)]
    assert first[10]["city"] == first[15]["city"] != first[11]["city"]  # the same string, the same row


def test_counted_modulo_table_is_max_id_plus_one(tmp_path):
    path = write(tmp_path / "a.parquet", label=[0, 1, 0, 1], x=[0.1, 0.2, 0.3, 0.4], item=[3, 97, 5, 3])
    w = workload(tmp_path, path, split="files", eval_files=["*"])
    assert [t.num_embeddings for t in w.tables] == [98]
    assert [r[2]["item"] for r in rows_of(w, "eval")] == [[3], [97], [5], [3]]


@pytest.mark.slow
def test_row_hash_split_is_seeded_and_every_eval_row_comes_once(tmp_path):
    n = 3000
    path = write(tmp_path / "a.parquet", label=[i % 2 for i in range(n)], row=[float(i) for i in range(n)], item=[i % 50 for i in range(n)])
    w = workload(tmp_path, path, eval_fraction=0.25, read_rows=256)
    train, eval_ = [r[0] for r in rows_of(w, "train", 100)], [r[0] for r in rows_of(w, "eval", 100)]
    assert len(eval_) == len(set(eval_)) == w.num_samples("eval") and 600 < len(eval_) < 900
    assert sorted(train + eval_) == list(range(n))  # each row in one split, once
    assert [r[0] for r in rows_of(workload(tmp_path, path, eval_fraction=0.25), "eval", 100)] == eval_  # the same rows every run
    other = [r[0] for r in rows_of(workload(tmp_path, path, eval_fraction=0.25, split_seed=1), "eval", 100)]
    assert other != eval_
    calibration = [r[0] for r in rows_of(workload(tmp_path, path, eval_fraction=0.25, calibration_samples=10), "calibration")]
    assert calibration == train[:10]


def test_files_split_folder_and_glob(tmp_path):
    folder = tmp_path / "days"
    folder.mkdir()
    for day in range(3):
        write(folder / f"day_{day}.parquet", label=[0, 1, 1], row=[float(10 * day + i) for i in range(3)], item=[1, 2, 3])
    w = workload(tmp_path, folder, split="files", eval_files=["day_2.*"], calibration_files=["day_1.*"])
    assert [r[0] for r in rows_of(w, "eval")] == [20, 21, 22]
    assert [r[0] for r in rows_of(w, "calibration")] == [10, 11, 12]
    assert [r[0] for r in rows_of(w, "train")] == [0, 1, 2]
    assert len(workload(tmp_path, folder / "day_*.parquet", split="files", eval_files=["day_0.*"]).files) == 3


@pytest.mark.parametrize("columns,cfg,says", [
    ({"click": [0, 1], "item": [1, 2]}, {}, "has no column 'label' (workload.label)"),
    ({"label": ["yes", "no"], "item": [1, 2]}, {}, "label column 'label' is string"),
    ({"label": [0, 1], "price": ["1.5", "2"], "item": [1, 2]}, {"dense": ["price"]}, "dense column 'price' is string"),
    ({"label": [0, 1], "item": [1.5, 2.5]}, {"sparse": ["item"]}, "sparse column 'item' is double"),
])  # fmt: skip
def test_wrong_columns_are_one_user_error(tmp_path, columns, cfg, says):
    path = write(tmp_path / "a.parquet", **columns)
    with pytest.raises(UserError, match=None) as info:
        workload(tmp_path, path, **cfg)
    assert says in str(info.value)


def test_first_pass_is_cached_and_sees_a_replaced_file(tmp_path):
    path = write(tmp_path / "a.parquet", label=[0, 1] * 10, item=list(range(20)))
    w = workload(tmp_path, path, split="files", eval_files=["*"])
    assert w.num_samples("eval") == 20 and len(list((tmp_path / "cache" / "parquet").glob("*.json"))) == 1
    write(path, label=[0, 1] * 5, item=list(range(10)))
    assert workload(tmp_path, path, split="files", eval_files=["*"]).num_samples("eval") == 10


@pytest.mark.parametrize("make,says", [
    (lambda p: write(p, label=["a", "b"], item=[1, 2]), "label column 'label' is string"),
    (lambda p: write(p, click=[0, 1], item=[1, 2]), "has no column 'label'"),
    (lambda p: write(p, label=[0, 1], item=pa.array([None, None], pa.int64())), "no whole rows to read (2 bad rows skipped (missing id: 2)"),
    (lambda p: p.write_text("label,item\n0,1\n"), "is not a readable Parquet file"),
])  # fmt: skip
@pytest.mark.slow
def test_a_malformed_file_exits_2_before_any_work(tmp_path, make, says):
    path = tmp_path / "bad.parquet"
    make(path)
    result = run_bench("workload=parquet", f"workload.path={path}", f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert not (tmp_path / "reports").exists()


# ------------------------------------------------------------------------------ label leaks


@pytest.mark.parametrize("name,part", [
    ("oracle_logit", "dense"), ("clickProbability", "dense"), ("ctr", "dense"), ("target", "dense"), ("was_clicked", "sparse"),
])  # fmt: skip
def test_an_inferred_column_named_like_the_label_is_refused(tmp_path, name, part):
    value = [0.1, 0.9] if part == "dense" else [0, 1]
    path = write(tmp_path / "a.parquet", label=[0, 1], price=[1.5, 2.0], item=[1, 2], **{name: value})
    with pytest.raises(UserError) as info:
        workload(tmp_path, path)
    line = str(info.value)
    assert "\n" not in line and f"column {name!r} would become a {part} feature by inference" in line, line
    assert f"workload.oracle={name}" in line
    if part == "dense":
        assert f"workload.dense=[price,{name}]" in line and "leave it out with workload.dense=[price]" in line, line


def test_a_declared_or_oracle_column_named_like_the_label_is_taken(tmp_path):
    path = write(tmp_path / "a.parquet", label=[0, 1, 0, 1], price=[1.5, 2.0, 1.0, 3.0], score=[0.2, 0.8, 0.3, 0.9], item=[1, 2, 3, 4])
    declared = workload(tmp_path, path, dense=["price", "score"], split="files", eval_files=["*"])
    assert declared.columns.dense == ("price", "score")
    assert declared.mapping() == "workload parquet columns: label label; dense [price, score]; sparse (inferred) [item]"
    oracle = workload(tmp_path, path, oracle="score", split="files", eval_files=["*"])
    assert oracle.columns.dense == ("price",)
    assert oracle.mapping() == "workload parquet columns: label label; dense (inferred) [price]; sparse (inferred) [item]; oracle score"


def test_words_that_only_contain_a_leak_word_are_features(tmp_path):
    path = write(tmp_path / "a.parquet", label=[0, 1], probe_ms=[1.5, 2.0], scoreboard=[0.2, 0.3], item_category=[1, 2])
    w = workload(tmp_path, path)
    assert w.columns.dense == ("probe_ms", "scoreboard") and [s.name for s in w.columns.sparse] == ["item_category"]

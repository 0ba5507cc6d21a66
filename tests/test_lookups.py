"""bench.measure.lookups: the table collections timed alone, per id and per distinct row, with an injected clock."""

from __future__ import annotations

import itertools

import torch
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.measure.lookups import collections, lookup_timing, random_ids, rows_of


class Ranker(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ec = EmbeddingCollection([EmbeddingConfig(name="t_item", embedding_dim=4, num_embeddings=50, feature_names=["history", "item_id"])])
        self.mlp = torch.nn.Linear(4, 1)

    def forward(self, dense, kjt):
        return self.mlp(self.ec(kjt)["item_id"].values()).squeeze(1)


def _kjt() -> KeyedJaggedTensor:
    # two rows of one request: each carries the history [3, 4, 5]; candidates 7 and 3
    return KeyedJaggedTensor.from_lengths_sync(["history", "item_id", "request"], torch.tensor([3, 4, 5, 3, 4, 5, 7, 3, 9, 9]),
                                               torch.tensor([3, 3, 1, 1, 1, 1]))


def test_rows_count_every_id_and_each_distinct_row_once():
    model = Ranker()
    assert collections(model) == [model.ec]
    assert rows_of(model.ec, _kjt()) == (8, 4)  # 8 ids of t_item (the side key `request` is no table's), rows 3, 4, 5, 7


def test_the_fastest_pass_over_the_rows_gives_ns_per_id_and_per_distinct_row():
    ticks = itertools.count(0, 1000)  # each clock read 1 us later: every pass over two calls reads 2 ticks
    out = lookup_timing(Ranker(), [(torch.zeros(2, 1), _kjt())] * 2, clock=lambda: next(ticks), repeats=3, random_n=100)
    assert out["calls"] == 2 and out["ids_per_call"] == 8 and out["distinct_rows_per_call"] == 4
    assert out["ns_per_id"] == 1000 / 16 and out["ns_per_distinct_row"] == 1000 / 8
    assert out["random_rows"] == 200 and out["ns_per_random_row"] == 1000 / 200  # 100 ids of each of the two features
    assert out["output_bytes_per_random_row"] == 4 * 4  # each id comes back as a row of 4 fp32 values
    # the collection alone: its one pass over the 200 rows read 2 ticks, as the whole call's did
    assert out["random_by_collection"] == [{"tables": ["t_item"], "largest_table_rows": 50, "rows": 200, "ns_per_row": 1000 / 200,
                                            "output_bytes_per_row": 16.0}]


def test_random_ids_spread_over_each_table():
    kjt = random_ids(Ranker().ec, ["history", "item_id", "request"], 5000, torch.Generator().manual_seed(1))
    assert kjt.keys() == ["history", "item_id", "request"] and kjt.lengths().tolist() == [5000, 5000, 0]  # the model's keys, in order
    assert int(kjt.values().min()) < 3 and int(kjt.values().max()) > 46 and int(kjt.values().max()) < 50


def test_a_quantized_collection_that_caches_its_feature_order_is_timed_on_random_rows():
    """torchrec's quantized collections (cache_features_order) read every batch in the first one's key order."""
    from bench.backends.direct import build_quantized_ebc

    model = Ranker()
    model.ec = build_quantized_ebc(model.ec, {"t_item": "int4"}, torch.device("cpu"), 1, seed=0)
    pooled = EmbeddingBagCollection(tables=[EmbeddingBagConfig(name="t_user", embedding_dim=4, num_embeddings=9, feature_names=["request"])])
    model.ebc = build_quantized_ebc(pooled, {"t_user": "int8"}, torch.device("cpu"), 1, seed=0)
    out = lookup_timing(model, [(torch.zeros(2, 1), _kjt())] * 2, random_n=64)
    assert out["random_rows"] == 3 * 64 and out["ns_per_random_row"] > 0
    # INT4 and INT8 rows come back dequantized to fp32 (the output dtype bench.backends.direct builds with): 16 bytes
    # a row of 4, the unpooled ones and the bags of one alike
    assert out["output_bytes_per_random_row"] == 4 * 4
    alone = {tuple(c["tables"]): c for c in out["random_by_collection"]}
    assert alone[("t_item",)]["rows"] == 2 * 64 and alone[("t_user",)]["rows"] == 64 and alone[("t_user",)]["largest_table_rows"] == 9
    assert all(c["ns_per_row"] > 0 and c["output_bytes_per_row"] == 16 for c in alone.values())


def test_a_model_without_collections_has_no_lookup_time():
    assert lookup_timing(torch.nn.Linear(2, 1), [(torch.zeros(1, 2), _kjt())]) is None

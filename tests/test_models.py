import pickle

import pytest
import torch

from bench.config import ModelConfig, TrainConfig
from bench.errors import UserError
from bench.models.checkpoint import load_checkpoint
from bench.models.dlrm import build_dlrm
from bench.models.train import trained_model
from bench.workloads.random_batch import tiny_model_config, tiny_tables
from bench.workloads.synthetic import SyntheticConfig, SyntheticWorkload


def small_workload():
    cfg = SyntheticConfig(train_samples=8192, eval_samples=4096, cardinalities=[50, 40, 30, 20], chunk_size=4096)
    return SyntheticWorkload(cfg, 0, "/unused")


def small_model_cfg(**kw):
    return ModelConfig(name="t", embedding_dim=8, dense_arch_layer_sizes=[16, 8], over_arch_layer_sizes=[8, 1], train=TrainConfig(samples=8192, batch_size=1024, progress=False), **kw)


def test_dlrm_shapes_are_checked():
    with pytest.raises(UserError, match="must end with embedding_dim"):
        build_dlrm(ModelConfig(name="x", embedding_dim=8, dense_arch_layer_sizes=[16, 4]), tiny_tables(), 13)
    with pytest.raises(UserError, match="must end with 1"):
        build_dlrm(ModelConfig(name="x", embedding_dim=8, dense_arch_layer_sizes=[8], over_arch_layer_sizes=[4, 2]), tiny_tables(), 13)


def test_dcn_arch_builds():
    cfg = ModelConfig(name="x", arch="dlrm_dcn", embedding_dim=8, dense_arch_layer_sizes=[8], over_arch_layer_sizes=[8, 1], dcn_low_rank_dim=4)
    assert type(build_dlrm(cfg, tiny_tables(), 13)).__name__ == "DLRM_DCN"


@pytest.mark.slow
def test_training_is_cached_and_reused(tmp_path):
    w = small_workload()
    first, info1 = trained_model(small_model_cfg(), w, 0, tmp_path)
    second, info2 = trained_model(small_model_cfg(), w, 0, tmp_path)
    assert info1["source"] == "trained" and info2["source"] == "cache" and info1["key"] == info2["key"]
    for (k, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), k
    # A change in the training config trains anew under another key.
    third_cfg = small_model_cfg()
    third_cfg.train.dense_lr = 1e-3
    _, info3 = trained_model(third_cfg, w, 0, tmp_path)
    assert info3["source"] == "trained" and info3["key"] != info1["key"]


def test_checkpoint_loads_weights_only(tmp_path):
    w = small_workload()
    model, _ = trained_model(small_model_cfg(), w, 0, tmp_path / "c")
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    loaded, info = trained_model(small_model_cfg(checkpoint=str(path)), w, 0, tmp_path / "c")
    assert info["source"] == "checkpoint"
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))


def test_checkpoint_mismatch_names_missing_and_unexpected_keys(tmp_path):
    model = build_dlrm(tiny_model_config(), tiny_tables(), 13)
    state = model.state_dict()
    state["extra.weight"] = state.pop("over_arch.model.0._linear.weight") if "over_arch.model.0._linear.weight" in state else torch.zeros(1)
    path = tmp_path / "bad.pt"
    torch.save(state, path)
    with pytest.raises(UserError, match=r"missing keys .*unexpected keys extra\.weight") as exc:
        load_checkpoint(build_dlrm(tiny_model_config(), tiny_tables(), 13), path)
    assert "\n" not in str(exc.value)


def test_checkpoint_shape_mismatch(tmp_path):
    path = tmp_path / "m.pt"
    torch.save(build_dlrm(tiny_model_config(embedding_dim=8), tiny_tables(rows=50), 13).state_dict(), path)
    with pytest.raises(UserError, match="shapes that differ"):
        load_checkpoint(build_dlrm(tiny_model_config(embedding_dim=8), tiny_tables(rows=60), 13), path)


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_pickle_carrying_code_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(1), "evil": Evil()}, path)
    with pytest.raises(UserError, match="never runs code"):
        load_checkpoint(build_dlrm(tiny_model_config(), tiny_tables(), 13), path)


def test_missing_truncated_and_foreign_checkpoints(tmp_path):
    model = build_dlrm(tiny_model_config(), tiny_tables(), 13)
    with pytest.raises(UserError, match="checkpoint not found"):
        load_checkpoint(model, tmp_path / "nope.pt")
    good = tmp_path / "good.pt"
    torch.save(model.state_dict(), good)
    truncated = tmp_path / "trunc.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(UserError, match="truncated"):
        load_checkpoint(model, truncated)
    foreign = tmp_path / "foreign.pt"
    foreign.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(UserError):
        load_checkpoint(model, foreign)
    listy = tmp_path / "list.pt"
    torch.save([torch.zeros(1)], listy)
    with pytest.raises(UserError, match="does not hold a state dict"):
        load_checkpoint(model, listy)


def test_damaged_cached_checkpoint_is_a_miss_and_retrains(tmp_path):
    w = small_workload()
    _, info = trained_model(small_model_cfg(), w, 0, tmp_path)
    cached = tmp_path / "models" / f"{info['key']}.pt"
    cached.write_bytes(cached.read_bytes()[:100])
    model, again = trained_model(small_model_cfg(), w, 0, tmp_path)
    assert again["source"] == "trained" and again["key"] == info["key"]
    assert trained_model(small_model_cfg(), w, 0, tmp_path)[1]["source"] == "cache"


def test_a_logits_model_reads_no_probe_batch():
    """The probe batch finds a probabilities model's trailing sigmoid; a model that returns logits runs none, so
    loading it from the cache generates no calibration rows."""
    from bench.models.train import probe_for

    class NoBatches:
        def batches(self, split, batch_size):
            raise AssertionError("a logits model read a probe batch")

    assert probe_for(small_model_cfg(), NoBatches()) is None
    dense, kjt = probe_for(small_model_cfg(output="probabilities"), small_workload())
    assert dense.shape[0] == 8 and kjt.keys()

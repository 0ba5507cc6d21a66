"""Every model torchrec ships that takes `(dense, KeyedJaggedTensor)` and an EmbeddingBagCollection, through
every backend, as a user hands it in (`model=custom model.factory=examples.torchrec_models.<name>:build`).

The rows: DLRM, DLRM_DCN, DLRM_Projection, SimpleDeepFMNN (ends in nn.Sigmoid: `model.output=probabilities`)
and the experimental DLRM_Transformer. The columns: fp32, fake_quant, fp32_tbe, fp16_tbe, int8_tbe and uint4
must be `ok`; int8_tbe and uint4 (8- and 4-bit tables, int8 dense layers) must keep |ΔAUC| < BOUND; int2_tbe
is reported without a bound (`ok` or `skipped` with a reason). fp32 itself must learn: AUC well above 0.5
and within REACH of a logistic regression on the same splits.

What keeps it under a minute: a tiny workload (8 tables of at most 2000 rows, 16k train rows, 2k eval rows),
32 training steps of 512 at a higher dense learning rate (DeepFM 64), timing cut to one call, one thread (a tiny job on
two threads of a busy machine spends most of its time waiting for the other thread), and one Session for the
module: the workload is generated once, each row's fp32 model is trained once and scored once, and its
backends reuse both (and each other's fake-quant twin and attribution scores). The roofline's machine limits
(bench.devices.cpu: a bandwidth measurement of a few seconds per row width) are not what this test
checks, so they are stand-in figures here. The test prints each row of the model x backend -> ΔAUC table
(`pytest -s`).
"""

from __future__ import annotations

import pytest
import torch

from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.config.compose import compose
from bench.devices import cpu
from bench.runner import Session, run_one
from examples.torchrec_models import transformer_dlrm
from tests.test_custom_model import logistic_regression_auc

BOUND = 0.02  # |ΔAUC| of the 8- and 4-bit backends
REACH = 0.05  # fp32 AUC at least the logistic regression's minus this
BOUNDED = ("int8_tbe", "uint4")
REQUIRED = ("fp32", "fake_quant", "fp32_tbe", "fp16_tbe", *BOUNDED)
REPORTED = ("int2_tbe",)
MODELS = {
    "dlrm": [],
    "dlrm_dcn": [],
    "dlrm_projection": [],
    "deepfm": ["model.output=probabilities", "model.train.samples=32768"],  # learns slowest: 64 steps
    "transformer_dlrm": [],
}
TINY = [
    "+preset=tiny", "model=custom", "workload.cardinalities=[2000,1000,500,200,100,50,20,10]",
    "workload.train_samples=16384", "workload.eval_samples=2048", "workload.calibration_samples=512",
    "model.train.samples=16384", "model.train.batch_size=512", "model.train.dense_lr=0.01", "batch_size=256",
    "eval_batch_size=2048", "calibration_batch_size=256", "threads=1", "timing.trials=1", "timing.max_rounds=1",
    "timing.batches_per_trial=1", "timing.warmup_batches=0", "timing.pool_samples=0", "timing.paired=false",
]  # fmt: skip


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One Session and one cache for every row; the roofline's limits stand in; the thread count restored after."""
    threads = torch.get_num_threads()
    root = tmp_path_factory.mktemp("torchrec_models")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu, "gather_bandwidth", lambda row_bytes, total_bytes, buffer=None: 10e9)
        mp.setattr(cpu.CpuDevice, "buffer_bytes", lambda self, device: 1 << 20)  # the shared buffer the stand-in never reads
        mp.setattr(cpu, "gemm_flops", lambda: {"fp32": 100e9, "int8": 200e9})
        yield Session(), [f"cache_dir={root / 'cache'}", f"reports_dir={root / 'reports'}"], {}
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_every_backend_runs_the_torchrec_model_within_the_bound(name, shared):
    session, dirs, references = shared
    base = [*TINY, f"model.factory=examples.torchrec_models.{name}:build", *MODELS[name], *dirs]
    records = {b: run_one(compose([*base, f"backend={b}"]), session) for b in (*REQUIRED, *REPORTED)}
    cells = {b: f"{r.metrics['auc_delta']:+.4f}" if r.status == "ok" else r.status for b, r in records.items()}
    print(f"| {name} | {records['fp32'].metrics.get('auc', float('nan')):.4f} | " + " | ".join(cells.values()) + " |")
    for backend in REQUIRED:
        assert records[backend].status == "ok", (name, backend, records[backend].error)
    for backend in BOUNDED:
        assert abs(records[backend].metrics["auc_delta"]) < BOUND, (name, backend, records[backend].metrics["auc_delta"])
    for backend in REPORTED:
        assert records[backend].status == "ok" or (records[backend].status == "skipped" and records[backend].error), records[backend].error
    auc = records["fp32"].metrics["auc"]
    if "reference" not in references:  # every row reads the same workload: one logistic regression for all
        references["reference"] = logistic_regression_auc(session.work.workload(compose(base)))
    reference = references["reference"]
    assert auc > 0.65 and auc > reference - REACH, (name, auc, reference)


@pytest.mark.slow
def test_an_fp32_model_at_chance_is_an_error_and_no_reference(shared):
    """SimpleDeepFMNN with the tiny preset's 8 training steps of 2048 stays at chance (eval AUC 0.508 here)."""
    session, dirs, _ = shared
    base = ["+preset=tiny", "model=custom", "model.factory=examples.torchrec_models.deepfm:build", "model.output=probabilities",
            "threads=1", "timing.paired=false", *dirs]
    fp32, int8 = (run_one(compose([*base, f"backend={b}"]), session) for b in ("fp32", "int8_tbe"))
    assert fp32.status == "error" and fp32.error.startswith("the trained fp32 model stayed at chance: eval AUC 0.50"), fp32.error
    assert int8.status == "error" and int8.error.startswith("no valid reference: the fp32 model stayed at chance"), int8.error
    assert fp32.metrics["score_read"] == "the input of over_arch.model.1 (nn.Sigmoid)" and fp32.metrics["scores_saturated"] == 0.0


def transformer_scores(attend_across: str, batch: int) -> torch.Tensor:
    """DLRM_Transformer's eval scores of the first `batch` of 8 fixed samples (2 features, one id each)."""
    torch.manual_seed(0)
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=8, num_embeddings=10, feature_names=[f"f{i}"]) for i in range(2)]
    model = transformer_dlrm.build(EmbeddingBagCollection(tables=tables), dense_in_features=3, nhead=2,
                                   attend_across=attend_across).eval()
    dense, ids = torch.randn(8, 3), torch.randint(0, 10, (2, 8))
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=["f0", "f1"], values=ids[:, :batch].reshape(-1),
                                              lengths=torch.ones(2 * batch, dtype=torch.long))
    with torch.no_grad():
        return model(dense[:batch], kjt).reshape(-1)


def test_the_transformer_attends_across_a_samples_features_not_across_its_batch():
    """A sample's score is its own: the same in a batch of 8 as in a batch of 3. torchrec's sequence-first form
    (`attend_across="batch"`) attends across the batch, so there it changes."""
    alone, together = transformer_scores("features", 3), transformer_scores("features", 8)[:3]
    torch.testing.assert_close(alone, together)
    assert not torch.allclose(transformer_scores("batch", 3), transformer_scores("batch", 8)[:3])
    with pytest.raises(ValueError, match="attend_across='rows' is not one of features, batch"):
        transformer_scores("rows", 3)

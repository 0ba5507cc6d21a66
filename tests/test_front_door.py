"""The front door as a new user meets it: `--help`, typos in keys, input files refused before any
work, and the one description of `backend.bits`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench import preflight
from bench.backends.fake_quant import ROW_BITS_TEXT
from bench.errors import UserError
from tests.conftest import REPO, TINY, run_bench
from tests.test_bad_input import cli


def one_line_exit_2(result):
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert "weights_only" not in result.stderr and "To append" not in result.stderr
    return result.stderr.strip()


@pytest.mark.parametrize(
    "args,says",
    [
        (["foo=1"], "unknown key 'foo' in foo=1: the config has no option 'foo'"),
        (["+foo=1"], "unknown key 'foo' in +foo=1"),
        (["timing.trails=3"], "did you mean timing.trials?"),
    ],
)
@pytest.mark.slow
def test_unknown_keys_are_one_line_exit_2(tmp_path, args, says):
    err = one_line_exit_2(run_bench(*args, f"reports_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}", timeout=60))
    assert says in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "records.jsonl").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["backend=uint4", "+backend.per_table={t_cat_3: int8}"],
        ["backend=uint4", "+backend.per_table.t_cat_3=int8"],
        ["backend=fake_quant", "backend.bits=4", "+backend.per_table={t_cat_0: 8}"],
        ["+sweep=nightly", "gate.rules.int8_tbe.min_speedup=1.5"],
        ["+sweep=nightly", "+gate.rules.int8_tbe.min_speedup=1.5"],
        ["+sweep=quant", "batch_size=64,256", "device=cpu"],
        ["workload=criteo_kaggle", "workload.categorical=first_seen", "workload.max_ind_range=10000000", "--cfg", "job"],
    ],
)
@pytest.mark.slow
def test_real_options_pass(args):
    preflight.check(args)


@pytest.mark.parametrize(
    "args,says",
    [
        (["backend=int8_tbe", "backend.bits=4"], "backend int8_tbe has no option 'bits'; its options: mlp, mlp_mode, mlp_output, mlp_wide, mlp_wide_ratio, per_table"),
        (["+backend.foo=1"], "backend fp32 has no option 'foo'; it has no options"),
        (["+gate.rules.int8_tbe.min_sped=1"], "did you mean gate.rules.int8_tbe.min_speedup?"),
        (["backend=uint4", "backend.per_table.t_cat_3=int8"], "takes new entries with a +: +backend.per_table.t_cat_3=int8"),
        (["backend=uint4", "+backend.per_table.t_cat_3=int9"], "is not a table weight type"),
        (["+sweep=quant", "backend.bits=4"], "backend fp32 has no option 'bits'"),  # every swept backend is checked
        (["backend=fake_quant", "backend.bits=3"], f"backend.bits=3: choose {ROW_BITS_TEXT}"),
        (["workload=criteo_kaggle", "workload.categorical=bogus"], "workload.categorical='bogus': choose one of hash, frequency, first_seen"),
        (["model.dense_arch_layer_sizes=[4,5]"], "must end with embedding_dim"),
        (["batch_size=big"], "batch_size=big: Value 'big' of type 'str' could not be converted to Integer"),
    ],
)
@pytest.mark.slow
def test_bad_choices_are_refused_before_any_work(args, says):
    with pytest.raises(UserError) as exc:
        preflight.check(args)
    assert says in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.slow
def test_missing_or_empty_inputs_are_refused_before_torch_loads(tmp_path):
    """Refused in the check that runs before torch is imported: a second or so, nothing written."""
    empty = tmp_path / "empty.tsv"
    empty.write_bytes(b"")
    garbage = tmp_path / "model.pt"
    garbage.write_bytes(b"\x13\x37" * 500)
    code = (
        "import sys\n"
        "from bench import cli\n"
        f"sys.argv = ['bench', *sys.argv[1:], 'reports_dir={tmp_path}', 'hydra.run.dir={tmp_path / 'run'}']\n"
        "try:\n    cli.main()\nexcept SystemExit as exc:\n    print(exc.code, 'torch' in sys.modules)\n"
    )
    cases = [
        (["workload=criteo_kaggle", f"workload.path={tmp_path / 'nope.tsv'}"], "no such file or folder"),
        (["workload=criteo_kaggle", f"workload.path={empty}"], "is an empty file"),
        ([f"model.checkpoint={tmp_path / 'nope.pt'}"], "checkpoint not found"),
        ([f"model.checkpoint={garbage}"], "is not a torch checkpoint: neither a torch zip archive nor a pickle"),
    ]
    for args, says in cases:
        result = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert result.stdout.split() == ["2", "False"], result.stderr
        assert says in result.stderr and result.stderr.strip().count("\n") == 0
    assert not (tmp_path / "records.jsonl").exists() and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_help_explains_the_tool(tmp_path):
    result = run_bench("--help", timeout=60)
    assert result.returncode == 0
    out = result.stdout
    for text in ("Main commands:", "+sweep=quant", "+sweep=nightly", "python -m bench.report", "backend=", "uint4", "criteo_kaggle",
                 "batch_size=2048", "<reports_dir>/<sweep>/latest", "2 bad input", "3 the", "store check"):
        assert text in out, text
    sweeps = sorted(p.stem for p in (REPO / "conf" / "sweep").glob("*.yaml") if p.stem != "recommend")  # recommend: a command's node
    assert f"[+sweep={'|'.join(sweeps)}]" in out and len(sweeps) == 9  # every sweep of conf/sweep/
    assert "python -m bench recommend slo.p99_ms=60 accuracy.max_auc_drop=0.001" in out
    assert ("ao_embeddingbag, ao_embeddingbag4, compiled_fp32, inc_int8_static, onnxruntime_{fp32,int8_dynamic,int8_static,w4}, "
            "openvino_{fp32,int8,w4,w8}, quark_w8a8  the quantization toolkits' backends") in out
    for text in ("throughput± (samples/s ↑)", "speedup± (x ↑)", "peak_rss_bytes (bytes ↓)", "latency_ms (ms ↓)", "(unit ↑) higher is better",
                 "default model (a few minutes on 2 busy cores)"):
        assert text in out, text  # each metric's unit and direction; the first run's cost
    assert "trains in seconds" not in out
    assert "base_" not in out and "_target_" not in out  # no schema names, no config dump
    assert len(out.splitlines()) < 150  # two or three screens: every config group, its options and the metrics


def test_the_docs_describe_backend_bits_as_the_error_does():
    assert f"`backend.bits`: {ROW_BITS_TEXT}" in (REPO / "docs" / "backends.md").read_text()


@pytest.mark.slow
def test_a_job_that_fails_while_running_still_becomes_a_record(monkeypatch, tmp_path):
    """Only input found bad before the start is refused without a record."""
    code = cli(monkeypatch, *TINY, "workload.eval_samples=100", "batch_size=512", f"reports_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2
    assert (tmp_path / "records.jsonl").exists() and "larger than the eval split" in (tmp_path / "run" / "record.json").read_text()

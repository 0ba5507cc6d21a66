"""Every command in the fenced shell blocks of the README and of every docs page runs as written, or is
named here with where it runs instead (minutes of work: CI, the end-to-end tests, a user; or a machine's
set-up). The quick ones run in a folder where a tiny nightly has left a reports folder, as a user's would
be after their first night."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_bench

README = REPO / "README.md"
# Commands that take minutes as written, and where they run instead.
LONG = {
    "make run": "the default sweep, minutes; tests/test_nightly_command.py runs the sweep machinery end to end",
    "make test": "the whole suite: CI",
    "make test-fast": "the fast subset of the suite",
    "make lint": "CI runs lint-imports and the docs build; tests/test_layering.py and tests/test_docs.py here",
    "python -m bench backend=int8_tbe batch_size=4096": "the default model's job, minutes; the same route as +preset=tiny",
    "python -m bench +sweep=quant": "the default sweep, minutes",
    "python -m bench +sweep=nightly": "the default nightly, minutes; tests/test_nightly_command.py runs it tiny",
    "python -m bench +sweep=quant model=custom model.factory=examples.two_tower:build workload=parquet "
    "workload.path=examples/data/clicks.parquet": "a sweep of the example model, minutes; tests/test_custom_model.py runs it tiny",
}


DOCS = sorted((REPO / "docs").glob("*.md"))
SETUP = "sets up or installs a stack (network, minutes): CI's fresh-environment step (.ci/run)"
SCRIPT = "a benchmark script that times things: run by hand on a quiet machine (docs/testing.md), never by the tests"
MINUTES = "a job of the default or a larger model, minutes as written; the same route runs tiny in the end-to-end tests"
# Commands of docs/ pages that are not run here, and where they run instead (README's are in LONG).
DOCS_LONG = {
    **{c: SETUP for c in ("make setup", "make setup STACK=previous VENV=.venv-previous", "make setup TORCH_INDEX=",
                          "python3.11 -m venv .venv", ".venv/bin/pip install torch==2.14.1 fbgemm-gpu==1.9.0",
                          '.venv/bin/pip install -e ".[dev]"', ".venv/bin/pip install --no-deps torchrec==1.9.2")},
    "make docs": "the documentation site: tests/test_docs.py builds it strictly",
    "python -m bench +sweep=zoo": "every family x every backend, many minutes; tests/test_zoo_matrix.py runs the matrix tiny",
    "python -m bench +sweep=zoo '+zoo=dlrm,deepfm'": "a sweep of two families, minutes; tests/test_zoo_matrix.py runs each tiny",
    "OUT=<a folder to copy back> bash benchmarks/scripts/gpu_check_run.sh": "on a GPU machine only: tests/test_gpu_check.py runs it with "
                                                                           "stand-ins for .gpu/run.sh",
    "OUT=<a folder to copy back> BUDGET_S=540 bash benchmarks/scripts/gpu_session.sh":
        "on a lent GPU machine only: tests/test_gpu_check.py runs it with stand-ins for .gpu/run.sh",
    "pip install -e '.[onnxruntime]'": SETUP,
    "python -m bench +sweep=toolkits": "a sweep, minutes as written; tests/test_toolkits.py runs its backends on a tiny model",
    "python -m bench +sweep=toolkits model=custom model.factory=examples.torchrec_models.dlrm_dcn:build hydra.sweeper.params.batch_size=1024":
        "a sweep of DLRM_DCN, minutes as written; tests/test_deploy.py exports DLRM_DCN and tests/test_toolkits.py runs the backends tiny",
    "python -m bench +sweep=toolkits batch_size=1024 model=custom model.factory=examples.dcn_v2:build model.output=probabilities "
    "timing.calibrate=false timing.max_rounds=4 kernel_health=false hydra/launcher=joblib hydra.launcher.n_jobs=3":
        "a sweep of the DCN-v2 example, minutes as written; tests/test_toolkits.py runs it tiny through openvino_int8 and "
        "onnxruntime_int8_static",
    **{f"python benchmarks/scripts/{name}.py": SCRIPT for name in ("runner_overhead", "sweep_bench", "noise_bench", "scale_diagnose",
                                                                      "fit_criteo_access", "torchao_mlp", "cold_warm", "first_run_breakdown",
                                                                      "lookup_row_cost")},
    "python benchmarks/scripts/job_breakdown.py --phases": SCRIPT,
    "python benchmarks/scripts/probe_stability.py": "6 kernel probe decisions in three cases, minutes: tests/test_kernel_probe.py runs "
                                                    "it in its short mode",
    **{f"python benchmarks/scripts/train_curve.py --at {points}": "trains the default model (minutes): run by hand, never by the tests"
       for points in ("131072 262144 393216 524288 786432 1048576", "589824 655360 720896")},
    "pytest benchmarks/suites/": "the pytest-benchmark suites: tests/test_suites.py runs them in their quick mode",
    "python -m bench": MINUTES,
    # the DLRMv3 preset and its scale sweep (docs/sequential.md): tests/test_scale_seq.py runs the sweep and the script tiny
    **{c: MINUTES for c in ("python -m bench backend=uint4 +preset=dlrmv3 model.weights=random",
                            "python -m bench +preset=dlrmv3 workload.history_length=256 workload.candidates=64")},
    "python -m bench +sweep=scale model=hstu +preset=dlrmv3 threads=1 timing.clock=thread_cpu":
        "a sweep of 12 jobs up to 8 GB each, minutes as written; tests/test_scale_seq.py runs it tiny",
    "python benchmarks/scripts/dlrmv3_paper.py reports/records.jsonl": "reads a scale sweep's records: tests/test_scale_seq.py runs it "
                                                                       "on the tiny sweep's",
    **{c: MINUTES for c in (
        "python -m bench backend=uint4 '+backend.per_table={t_cat_3: int8}'", "python -m bench backend=fake_quant backend.bits=4",
        "python -m bench model=dlrm_kaggle threads=1", "python -m bench backend=ps_redis backend.cache_fraction=0.1",
        "python -m bench backend=openvino_int8",
        "python -m bench backend=onnxruntime_fp32 backend.export=plain batch_size=1024",
        "python -m bench backend=openvino_fp32 backend.triangle=fold batch_size=1024",
        "python -m bench backend=int8_tbe backend.mlp_engine=torchao", "python -m bench backend=uint4 backend.mlp_engine=torchao backend.mlp=int4",
        "python -m bench backend=uint4 sharding=row_wise world_size=2", "python -m bench backend=fake_quant sharding=column_wise world_size=2",
        "torchrun --standalone --nproc-per-node=2 -m bench backend=fp32 sharding=row_wise world_size=2",
        "python -m bench model=dlrm_v2_full backend=uint4", "python -m bench model=dlrm_v2_full backend=uint4_mixed",
        "python -m bench --multirun model=dlrm_v2_full backend=fp32,fp16_tbe,int8_tbe,uint4,int2_tbe,uint4_mixed threads=1 timing.clock=thread_cpu",
    )},
    "python -m bench model.checkpoint=model.pt": "needs the user's own model.pt; tests/test_cli.py runs a job from a checkpoint",
    **{c: "a recommend on the default model, minutes as written; tests/test_recommend_command.py runs the command on a tiny model"
       for c in ("python -m bench recommend slo.p99_ms=60 accuracy.max_auc_drop=0.001", "python -m bench recommend slo.qps=2000 memory.max_model_mb=4",
                 "python -m bench recommend accuracy.max_auc_drop=0.00001")},
    "python -m bench backend=uint4 backend.per_table_file=reports/tune/latest/per_table.yaml": "needs a tune's output: tests/test_tune.py runs it",
    **{c: "a sweep, minutes as written; its machinery runs tiny in tests/test_nightly_command.py and the per-sweep tests" for c in (
        "python -m bench +sweep=quant batch_size=2048 device=cpu", "python -m bench +sweep=quant resume=true", "python -m bench +sweep=ps",
        "python -m bench +sweep=tune tune.max_auc_drop=0.001", "python -m bench +sweep=serve", "python -m bench +sweep=sharded",
        "python -m bench +sweep=scale", "python -m bench +sweep=scale threads=1 timing.clock=thread_cpu",
        "python -m bench +sweep=scale threads=1 timing.clock=thread_cpu workload.table_rows=300000 workload.access=zipf,uniform batch_size=1024,4096",
        "python -m bench +sweep=nightly gate.rules.int8_tbe.min_speedup=1.5",
        "python -m bench +sweep=serve backend=fp32,uint4 serve.scenario=server", "python -m bench +sweep=serve serve.bound_ms=80",
        "python -m bench +sweep=serve batch_size=512,2048 serve.max_wait_ms=1,5",
        "python -m bench +sweep=serve serve.min_duration_s=600 serve.min_query_count=null serve.loadgen_seeds=mlperf",
        "python -m bench +sweep=serve gate.rules.uint4.min_qps_ratio=0.9 run_gate=true", "python -m bench +sweep=serve resume=true",
        "python -m bench +sweep=serve serve.paired=false",
        "python -m bench +sweep=sharded hydra/launcher=submitit_slurm hydra.launcher.partition=cpu hydra.launcher.cpus_per_task=16 "
        "hydra.launcher.mem_gb=64 hydra.launcher.timeout_min=120 hydra.launcher.array_parallelism=1",
    )},
    "python -m bench +sweep=quant model=custom model.factory=examples.two_tower:build workload=parquet workload.path=examples/data/clicks.parquet "
    "workload.oracle=oracle_logit model.train.samples=50000": "the example model's sweep, minutes; tests/test_custom_model.py runs it tiny",
    **{c: "reads the Criteo Kaggle sample and a checkpoint under ../shared/: tests/test_criteo_workloads.py and tests/test_dlrm_import.py "
          "read the same files" for c in (
        "python -m bench model=dlrm_kaggle model.checkpoint=dlrm_kaggle.pt workload=criteo_kaggle "
        "workload.path=../shared/data/criteo/criteo_kaggle_train_head10k.tsv workload.categorical=first_seen workload.max_ind_range=10000000 batch_size=256",
        "python -m bench model=dlrm_kaggle model.checkpoint=dlrm_kaggle.pt workload=criteo_binary workload.path=kaggleAdDisplayChallenge_processed.npz batch_size=256",
        "python -m bench workload=criteo_kaggle workload.path=../shared/data/criteo/criteo_kaggle_train_head10k.tsv model.train.samples=8572 batch_size=256",
        "python -m bench +sweep=quant workload=criteo_kaggle workload.path=../shared/data/criteo/criteo_kaggle_train_head10k.tsv "
        "model.train.samples=8572 batch_size=64,256 device=cpu",
    )},
    **{c: "the dashboard walk-through's five nightlies, minutes; tests/test_dashboard.py plants the same history" for c in (
        'N="+sweep=nightly backend=fp32,int8_tbe workload.train_samples=65536 model.train.samples=65536',
        "workload.eval_samples=32768 threads=1 timing.clock=thread_cpu timing.min_trial_seconds=1 timing.trials=9",
        'reports_dir=demo-reports"', "python -m bench $N", "python -m bench $N timing.test_delay=0.2",
        "python -m bench dashboard demo-reports",
    )},
    "make setup-movielens": SETUP,
    # serving and recommend at DLRMv3's bound (docs/sequential.md): tests/test_serve_requests.py runs both tiny on HSTU
    **{c: "serves the DLRMv3 preset through LoadGen, tens of minutes as written; tests/test_serve_requests.py runs the "
          "serving sweep and recommend on a tiny HSTU through the real commands" for c in (
        "python -m bench +sweep=serve model=hstu +preset=dlrmv3 serve.bound_ms=80",
        "python -m bench recommend model=hstu +preset=dlrmv3 slo.p99_ms=80")},
    **{c: "trains a sequential model, a minute to minutes as written; tests/test_sequential.py runs model=hstu on synthetic_seq tiny "
          "through the command and checks examples.din against the contract on synthetic_seq and Parquet sequences" for c in (
        "python -m bench backend=fp32 model=hstu workload=synthetic_seq", "python -m bench backend=fp32 model=hstu workload=movielens",
        "python -m bench backend=fp32 model=hstu workload=synthetic_seq +preset=tiny workload.num_items=100 model.train.batch_size=128 "
        "model.train.sparse_lr=0.3",
        "python -m bench model=custom model.factory=examples.din:build workload=synthetic_seq",
        "python -m bench model=custom model.factory=examples.din:build workload=parquet workload.path=examples/data/clicks.parquet "
        "workload.oracle=oracle_logit workload.sequence_features=[history]",
    )},
    "python -m bench.report reports/quant/latest --baseline reports/quant/<earlier>":
        "<earlier> stands for an earlier run's folder; the README's bench.report command runs the same code here",
}


# Docs commands that run here in a short mode: as written, with these overrides after them. A sweep of
# minutes as written (a kernel probe, a timing calibration, the default data) runs every step of it on
# the tiny preset's timing; DeepFM needs 65536 training samples to leave chance (16384 do not).
SHORT = {
    "python -m bench +sweep=quant model=custom model.factory=examples.torchrec_models.deepfm:build model.output=probabilities "
    "backend=fp32,int8_tbe,uint4 batch_size=1024": ["+preset=tiny", "workload.train_samples=65536", "model.train.samples=65536"],
}


def fenced_commands(page) -> list[str]:
    """The command lines of a page's ```sh and ```bash blocks: comments dropped, continuation lines joined."""
    out = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", page.read_text(), re.S):
        text = re.sub(r"\\\n\s*", " ", block)
        for line in text.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                out.append(" ".join(command.split()))
    return out


def readme_commands() -> list[str]:
    return fenced_commands(README)


def docs_commands() -> dict[str, list[str]]:
    """Each docs page's commands (pages without any left out)."""
    return {page.name: commands for page in DOCS if (commands := fenced_commands(page))}


def quick_docs_commands() -> list[str]:
    """The docs pages' commands that run here, each once, in page order."""
    return list(dict.fromkeys(c for commands in docs_commands().values() for c in commands if c not in DOCS_LONG and c not in LONG))


def test_every_command_is_run_here_or_named_as_long():
    commands = readme_commands()
    assert "python -m bench --help" in commands and "make test" in commands
    quick = [c for c in commands if c not in LONG]
    assert all(c.startswith("python -m ") or c.startswith(". ") for c in quick), quick
    assert set(LONG) <= set(commands), set(LONG) - set(commands)  # no stale entries


def test_every_docs_command_is_run_here_or_named_with_where_it_runs():
    pages = docs_commands()
    every = {c for commands in pages.values() for c in commands}
    assert {"usage.md", "dashboard.md", "custom-model.md", "serving.md", "install.md"} <= set(pages)
    assert set(DOCS_LONG) <= every, set(DOCS_LONG) - every  # no stale entries
    assert set(SHORT) <= set(quick_docs_commands()), set(SHORT) - set(quick_docs_commands())
    quick = quick_docs_commands()
    assert all(c.startswith("python -m ") for c in quick), quick
    # a sweep as written takes minutes: one run here is shortened (SHORT) or tiny
    assert all(c in SHORT or "+preset=tiny" in c for c in quick if "+sweep=" in c), quick
    assert "python -m bench dashboard reports --out site/nightly compare.throughput_tolerance=0.1" in quick
    print(f"docs pages: {len(every)} distinct commands on {len(pages)} pages: {len(quick)} run here, "
          f"{len(every) - len(quick)} named with where they run instead")


@pytest.mark.slow
def test_the_quick_commands_run_as_written(tmp_path):
    # a tiny nightly into the nightly's own history (tiny runs keep theirs apart otherwise): the dashboard draws it
    first = run_bench("+sweep=nightly", "backend=fp32,int8_tbe", "+preset=tiny", "gate.history_name=history.jsonl", cwd=tmp_path,
                      timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    # a run with overrides moves only its own latest-<overrides>; the README's commands read `latest`, the sweep
    # as configured, which this tiny run stands in for
    [variant] = (tmp_path / "reports" / "nightly").glob("latest-*")
    assert not (tmp_path / "reports" / "nightly" / "latest").exists()
    os.symlink(os.readlink(variant), tmp_path / "reports" / "nightly" / "latest")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    quick = [c for c in readme_commands() if c not in LONG and c.startswith("python -m ")]
    quick += [c for c in quick_docs_commands() if c not in quick]
    for command in quick:
        args = [sys.executable, *shlex.split(command)[1:], *SHORT.get(command, [])]
        result = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stderr[-3000:]}"


def test_every_exit_code_is_in_the_readme_table_and_the_help():
    from bench import errors
    from bench.help import help_text

    codes = sorted({v for k, v in vars(errors).items() if k.startswith("EXIT_")})
    readme = (REPO / "README.md").read_text()
    help_words = " ".join(help_text().split())
    for code in codes:
        assert f"\n| {code} | " in readme, code
        assert f"{code} " in help_words, code
    assert 130 in codes and "130 interrupted (Ctrl-C)" in help_words

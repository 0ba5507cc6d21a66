"""`bench.sweep.finish`: the results are built once, at compare.alpha, and handed to the gate, the
report and the history; the verdict is written before anything is rendered; re-rendering and
re-judging the stored records later give the same verdicts and intervals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

import bench.report.publish
import bench.results.table
from bench.config import GateConfig, RuleSet
from bench.gate.stored import rejudge
from bench.report.__main__ import main as report_main
from bench.results.assemble import build_results
from bench.sweep import finish

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "gate"))
from gate_frames import record, row  # noqa: E402

ALPHA = 0.3  # not the default 0.05: at 0.05 int8_tbe's speedup interval [1.2, 1.8] straddles 1.3; at 0.3 [1.35, 1.65] clears it
RULES = GateConfig(rules={"int8_tbe": RuleSet(min_speedup=1.3)}, default_rules=RuleSet())


def nightly(tmp_path: Path) -> OmegaConf:
    sweep_dir = tmp_path / "multirun"
    for i, r in enumerate([record(row("fp32")), record(row("int8_tbe", speedup=1.5), spread=0.2)]):
        (sweep_dir / str(i)).mkdir(parents=True)
        (sweep_dir / str(i) / "record.json").write_text(json.dumps(r))
    return OmegaConf.create({
        "hydra": {"sweep": {"dir": str(sweep_dir)}, "overrides": {"task": []}},
        "sweep_name": "nightly", "reports_dir": str(tmp_path / "reports"), "run_gate": True,
        "gate": OmegaConf.structured(RULES), "compare": {"alpha": ALPHA},
    })


def count_table_builds(monkeypatch) -> list[int]:
    """Wrap `results_table` wherever a loaded bench module holds it; returns the call counter."""
    calls = [0]
    original = bench.results.table.results_table

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "") or "").startswith("bench") and getattr(module, "results_table", None) is original:
            monkeypatch.setattr(module, "results_table", counted)
    return calls


def test_finish_builds_the_results_once_and_gates_before_rendering(tmp_path, monkeypatch):
    config = nightly(tmp_path)
    calls = count_table_builds(monkeypatch)
    gated_first = []
    render = bench.report.publish.finish_report

    def finish_report(records, out_dir, *args, **kwargs):
        gated_first.append((Path(out_dir) / "gate.md").is_file() and (Path(out_dir) / "gate.xml").is_file())
        return render(records, out_dir, *args, **kwargs)

    monkeypatch.setattr(bench.report.publish, "finish_report", finish_report)
    assert finish(config) == 0
    assert calls[0] == 1  # one results table for the gate, the report, the console and the history
    assert gated_first == [True]  # the verdict was on disk before the report was rendered
    folder = next((tmp_path / "reports" / "nightly").glob("2*"))
    assert "PASS" in (folder / "gate.md").read_text().upper()

    # the report, the gate and the history read the same interval, the one at compare.alpha
    csv = pd.read_csv(folder / "results.csv").set_index("backend")
    history = [json.loads(line) for line in (tmp_path / "reports" / "history.jsonl").read_text().splitlines()]
    int8 = next(h for h in history if h["backend"] == "int8_tbe")
    at_alpha = build_results(build_inputs(folder), alpha=ALPHA).jobs.set_index("backend")
    assert csv.at["int8_tbe", "speedup_lo"] == int8["speedup_lo"] == at_alpha.at["int8_tbe", "speedup_lo"] > 1.3
    assert build_results(build_inputs(folder)).jobs.set_index("backend").at["int8_tbe", "speedup_lo"] < 1.3  # 0.05 would not


def build_inputs(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]


def test_the_stored_records_rerendered_and_rejudged_give_the_nightlys_verdicts(tmp_path, capsys):
    assert finish(nightly(tmp_path)) == 0
    folder = next((tmp_path / "reports" / "nightly").glob("2*"))
    stored_md, stored_csv = (folder / "gate.md").read_text(), (folder / "results.csv").read_text()
    again = rejudge(folder)  # `python -m bench.gate DIR`: the stored gate_config.yaml, compare.alpha included
    assert again.stored and (folder / "gate.md").read_text() == stored_md
    assert {(v.backend, v.rule): v.verdict for v in again.result.verdicts}[("int8_tbe", "min_speedup")] == "pass"
    assert report_main([str(folder)]) == 0  # `python -m bench.report DIR`: re-rendered at the stored compare.alpha
    assert (folder / "results.csv").read_text() == stored_csv  # the same intervals and verdict words as the run's
    at_default = rejudge(folder, ["compare.alpha=0.05"])  # the default alpha would judge otherwise, beside the stored one
    assert not at_default.stored and any("min_speedup" in c and "pass -> inconclusive" in c for c in at_default.changes)


def test_a_job_measured_again_is_read_from_its_last_again_folder_and_counted(tmp_path, capsys):
    # bench.cli.measure_again stores a job measured again after the host withheld its answer in <job>/again-<n>/, each
    # naming the record before it: the sweep's records, its report and its summary line read the job's last
    # measurement; the withheld one stays.
    from bench.sweep import again_dir, sweep_records, withheld_jobs

    config = nightly(tmp_path)
    job = Path(config.hydra.sweep.dir) / "1"
    first = json.loads((job / "record.json").read_text())
    first["metrics"]["measure_again"] = "no paired ratio, its rounds set aside: planted"
    (job / "record.json").write_text(json.dumps(first))
    assert [(j.name, r.record_id) for j, r in withheld_jobs(job.parent)] == [("1", first["record_id"])]
    before = first["record_id"]
    for n, why in ((1, "planted again"), (2, None)):
        again = {**first, "record_id": f"again{n}", "metrics": {**first["metrics"], "measured_again_after": before}}
        again["metrics"].pop("measure_again")
        if why:
            again["metrics"]["measure_again"] = why
        again_dir(job, n).mkdir()
        (again_dir(job, n) / "record.json").write_text(json.dumps(again))
        before = again["record_id"]
    stale = {**first, "record_id": "stale3", "metrics": {**first["metrics"], "measured_again_after": "an earlier run's record"}}
    again_dir(job, 3).mkdir()  # left by an earlier run into the same sweep folder: it names another record, and is not read
    (again_dir(job, 3) / "record.json").write_text(json.dumps(stale))
    assert [r.record_id for r in sweep_records(job.parent)] == [json.loads((job.parent / "0" / "record.json").read_text())["record_id"], "again2"]
    assert withheld_jobs(job.parent) == []
    assert finish(config) == 0
    out = capsys.readouterr().out
    assert "sweep nightly: 2 jobs (2 ok, 0 error, 0 skipped; 1 measured again after the host withheld an answer)" in out
    report = next((tmp_path / "reports" / "nightly").glob("2*"))
    assert [json.loads(line)["record_id"] for line in (report / "records.jsonl").read_text().splitlines()][1] == "again2"

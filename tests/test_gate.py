"""The gate: rules -> verdicts -> exit code, gate.md and gate.xml, overrides, stored configs, the CLI."""

from __future__ import annotations

import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from bench.config.compose import compose_dictconfig
from bench.errors import UserError
from bench.gate import (
    FAIL,
    GATE_CONFIG,
    INCONCLUSIVE,
    JOB,
    PASS,
    RULES,
    SKIPPED,
    GateConfig,
    RuleSet,
    evaluate_gate,
    gate_sweep,
    load_gate_config,
    rejudge,
    run_gate,
)
from bench.gate.__main__ import main as cli_main
from bench.gate.stored import read_settings

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "gate"))
from gate_frames import COLUMNS, FP32_AUC, frame, healthy, row, write_records  # noqa: E402

BACKENDS = ("fp32", "fake_quant", "int8_tbe", "uint4", "fp32_tbe", "fp16_tbe", "int2_tbe")


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def gate(**rules) -> GateConfig:
    return GateConfig(rules={b: RuleSet(**r) for b, r in rules.items()})


def parse_junit(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return root


def cases(root: ET.Element) -> list[ET.Element]:
    return list(root.iter("testcase"))


# --- config ---------------------------------------------------------------------------------


def test_default_config_covers_every_backend_with_published_targets():
    cfg = load_gate_config()
    assert set(BACKENDS) <= set(cfg.rules)
    assert cfg.inconclusive_fails is False
    assert cfg.rules["uint4"].min_auc_ratio == 0.999  # MLPerf high accuracy; Quark's 0.8027/0.8031 meets it
    assert 0.8027 / 0.8031 >= cfg.rules["uint4"].min_auc_ratio
    assert 0.8031 - 0.8027 <= cfg.rules["uint4"].max_auc_drop
    assert cfg.rules["int2_tbe"].min_auc_ratio == 0.99  # MLPerf default target


def test_rule_names_match_the_ruleset_fields():
    assert set(RULES) == set(RuleSet.__dataclass_fields__)


def test_overrides_via_dotlist_with_or_without_gate_prefix():
    cfg = load_gate_config("default", ["gate.rules.int8_tbe.min_speedup=100", "rules.uint4.max_auc_drop=-0.01",
                                       "gate.inconclusive_fails=true", "gate.rules.newbackend.min_speedup=2"])
    assert cfg.rules["int8_tbe"].min_speedup == 100.0
    assert cfg.rules["int8_tbe"].min_auc_ratio == 0.999  # the rest of the rule set is kept
    assert cfg.rules["uint4"].max_auc_drop == -0.01
    assert cfg.inconclusive_fails is True
    assert cfg.rules["newbackend"] == RuleSet(min_speedup=2.0)


@pytest.mark.parametrize("override", ["gate.rules.int8_tbe.min_sped=1", "gate.rules.int8_tbe.min_speedup=fast",
                                      "gate.history_runs=0", "gate.rules.uint4.min_auc_ratio=-1"])
def test_bad_overrides_are_user_errors(override):
    with pytest.raises(UserError):
        load_gate_config("default", [override])


def test_default_yaml_composes_through_hydra_with_an_override():
    cfg = compose_dictconfig(["gate=default", "gate.rules.int8_tbe.min_speedup=100"])
    assert OmegaConf.get_type(cfg.gate) is GateConfig
    result = evaluate_gate(healthy(), cfg.gate)  # a Hydra DictConfig is accepted as is
    assert result.exit_code == 1
    assert {v.backend for v in result.failures} == {"int8_tbe"}


# --- verdicts -------------------------------------------------------------------------------


def test_healthy_results_pass_the_default_gate(tmp_path):
    df = healthy()
    result = evaluate_gate(df, load_gate_config())
    assert result.exit_code == 0, result.failures
    assert result.counts[FAIL] == 0 and result.counts[INCONCLUSIVE] == 0
    assert run_gate(df, load_gate_config(), tmp_path) == 0
    md = (tmp_path / "gate.md").read_text()
    assert "**Gate: PASS**" in md
    root = parse_junit(tmp_path / "gate.xml")
    assert root.get("failures") == "0"
    assert int(root.get("tests")) == len(result.verdicts) == len(cases(root))


def test_unmeetable_speedup_fails_and_is_named(tmp_path):
    cfg = load_gate_config("default", ["gate.rules.int8_tbe.min_speedup=100"])
    assert run_gate(healthy(batch_sizes=(2048,)), cfg, tmp_path) == 1
    md = (tmp_path / "gate.md").read_text()
    assert "**Gate: FAIL**" in md
    assert "int8_tbe synthetic/cpu bs=2048: min_speedup" in md.splitlines()[2]  # named in the verdict line
    first_row = next(line for line in md.splitlines() if line.startswith("| ❌"))
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert table[2] == first_row and "int8_tbe" in first_row and "min_speedup" in first_row  # failing rows first
    root = parse_junit(tmp_path / "gate.xml")
    failed = [c for c in cases(root) if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [("gate.int8_tbe.synthetic.cpu.bs2048", "min_speedup")]
    assert "100.00x" in failed[0].find("failure").get("message")
    assert root.get("failures") == "1"
    suite = next(s for s in root.iter("testsuite") if s.get("name") == "gate.int8_tbe")
    assert suite.get("failures") == "1"


def test_auc_rule_demanding_a_gain_fails_every_quantized_row(tmp_path):
    cfg = load_gate_config("default", [f"gate.rules.{b}.max_auc_drop=-0.01" for b in BACKENDS])
    df = healthy(batch_sizes=(2048,))
    result = evaluate_gate(df, cfg)
    assert result.exit_code == 1
    drops = {v.backend: v for v in result.verdicts if v.rule == "max_auc_drop"}
    assert {b for b, v in drops.items() if v.verdict == FAIL} == set(BACKENDS)
    assert run_gate(df, cfg, tmp_path) == 1
    root = parse_junit(tmp_path / "gate.xml")
    assert int(root.get("failures")) == len(BACKENDS)
    md = (tmp_path / "gate.md").read_text()
    assert md.count("| ❌ fail |") == len(BACKENDS)


def test_verdict_row_fields():
    v = evaluate_gate(frame(row("uint4", delta=-0.0004, half=0.0002)), gate(uint4={"max_auc_drop": 0.001})).verdicts[0]
    assert (v.workload, v.device, v.backend, v.batch_size, v.rule) == ("synthetic", "cpu", "uint4", 2048, "max_auc_drop")
    assert v.threshold == 0.001 and v.value == pytest.approx(0.0004)
    assert v.interval == pytest.approx((0.0002, 0.0006))
    assert v.verdict == PASS
    frame_out = evaluate_gate(frame(row("uint4")), gate(uint4={"max_auc_drop": 0.001})).to_frame()
    assert list(frame_out.columns) == ["workload", "device", "backend", "batch_size", "rule", "threshold", "value",
                                       "interval", "verdict", "reason", "scenario", "sharding", "world_size", "access", "table_rows", "threads",
                                       "family"]


def test_auc_ratio_uses_fp32_auc_recovered_from_the_delta():
    v = evaluate_gate(frame(row("uint4", delta=-0.0004, half=0.0001)), gate(uint4={"min_auc_ratio": 0.999})).verdicts[0]
    assert v.value == pytest.approx((FP32_AUC - 0.0004) / FP32_AUC)
    assert v.interval == pytest.approx((1 - 0.0005 / FP32_AUC, 1 - 0.0003 / FP32_AUC))
    assert v.verdict == PASS
    v = evaluate_gate(frame(row("int2_tbe", delta=-0.01, half=0.001)), gate(int2_tbe={"min_auc_ratio": 0.99})).verdicts[0]
    assert v.verdict == FAIL  # 0.7931/0.8031 = 0.98755 < 0.99


def test_max_embedding_bytes():
    cfg = gate(uint4={"max_embedding_bytes": 1000})
    assert evaluate_gate(frame(row("uint4", embedding_bytes=999)), cfg).verdicts[0].verdict == PASS
    v = evaluate_gate(frame(row("uint4", embedding_bytes=2000)), cfg).verdicts[0]
    assert v.verdict == FAIL and "1000 B" in v.reason


# inconclusive: point estimate allowed, CI straddles the threshold.
STRADDLE = row("uint4", delta=-0.0008, half=0.0004)  # drop 0.0008, CI 0.0004 .. 0.0012 vs 0.001


def test_inconclusive_passes_by_default(tmp_path):
    cfg = gate(uint4={"max_auc_drop": 0.001})
    result = evaluate_gate(frame(STRADDLE), cfg)
    [v] = result.verdicts
    assert v.verdict == INCONCLUSIVE and "straddles" in v.reason
    assert result.exit_code == 0
    run_gate(frame(STRADDLE), cfg, tmp_path)
    [case] = cases(parse_junit(tmp_path / "gate.xml"))
    assert case.find("failure") is None and case.find("skipped") is None
    assert case.find("system-out").text.startswith("inconclusive:")
    assert "❔ inconclusive" in (tmp_path / "gate.md").read_text()


def test_inconclusive_fails_when_asked(tmp_path):
    cfg = gate(uint4={"max_auc_drop": 0.001})
    cfg.inconclusive_fails = True
    result = evaluate_gate(frame(STRADDLE), cfg)
    [v] = result.verdicts
    assert v.verdict == FAIL and v.reason.startswith("inconclusive")
    assert run_gate(frame(STRADDLE), cfg, tmp_path) == 1
    [case] = cases(parse_junit(tmp_path / "gate.xml"))
    assert case.find("failure") is not None


def test_point_crossing_fails_even_when_the_ci_straddles():
    # drop 0.0012 > 0.001 but CI 0.0008 .. 0.0016: fails by default, with the caveat in the reason.
    [v] = evaluate_gate(frame(row("uint4", delta=-0.0012, half=0.0004)), gate(uint4={"max_auc_drop": 0.001})).verdicts
    assert v.verdict == FAIL and "not distinguishable" in v.reason


def test_min_rule_straddle_and_clear_pass():
    cfg = gate(int8_tbe={"min_speedup": 1.0})
    # speedup 1.02, CI 0.969 .. 1.071 straddles 1.0
    assert evaluate_gate(frame(row("int8_tbe", speedup=1.02)), cfg).verdicts[0].verdict == INCONCLUSIVE
    assert evaluate_gate(frame(row("int8_tbe", speedup=1.2)), cfg).verdicts[0].verdict == PASS
    assert evaluate_gate(frame(row("int8_tbe", speedup=0.9)), cfg).verdicts[0].verdict == FAIL


def test_missing_metric_is_inconclusive_with_a_reason():
    r = row("uint4")
    r.update(auc_delta=None, auc_delta_lo=None, auc_delta_hi=None, speedup=float("nan"))
    result = evaluate_gate(frame(r), gate(uint4={"max_auc_drop": 0.001, "min_speedup": 1.0}))
    assert {v.rule: v.verdict for v in result.verdicts} == {"max_auc_drop": INCONCLUSIVE, "min_speedup": INCONCLUSIVE}
    assert all("missing" in v.reason for v in result.verdicts)
    assert result.exit_code == 0
    strict = gate(uint4={"max_auc_drop": 0.001})
    strict.inconclusive_fails = True
    assert evaluate_gate(frame(r), strict).exit_code == 1


def test_missing_metric_column_is_inconclusive():
    df = healthy(batch_sizes=(512,)).drop(columns=["speedup", "speedup_lo", "speedup_hi"])
    result = evaluate_gate(df, gate(int8_tbe={"min_speedup": 1.5}))
    [v] = [v for v in result.verdicts if v.backend == "int8_tbe"]
    assert v.verdict == INCONCLUSIVE and "speedup is missing" in v.reason


def test_point_without_interval_is_judged_on_the_point():
    r = row("uint4", delta=-0.0004)
    r.update(auc_delta_lo=None, auc_delta_hi=None)
    [v] = evaluate_gate(frame(r), gate(uint4={"max_auc_drop": 0.001})).verdicts
    assert v.verdict == PASS and v.interval is None


def test_errored_job_fails_and_skipped_job_is_skipped(tmp_path):
    df = pd.concat([
        healthy(batch_sizes=(2048,)),
        frame(row("int2_tbe", batch_size=4096, status="error", error="RuntimeError: FBGEMM op <int2> failed\nTraceback..."),
              row("uint4", device="cuda", status="skipped", error="no CUDA device")),
    ], ignore_index=True)
    result = evaluate_gate(df, load_gate_config())
    errored = [v for v in result.verdicts if v.verdict == FAIL]
    assert [(v.backend, v.rule) for v in errored] == [("int2_tbe", JOB)]
    assert "RuntimeError" in errored[0].reason
    skipped = [v for v in result.verdicts if v.verdict == SKIPPED]
    assert [(v.backend, v.device, v.rule) for v in skipped] == [("uint4", "cuda", JOB)]
    assert result.exit_code == 1

    assert run_gate(df, load_gate_config(), tmp_path) == 1
    root = parse_junit(tmp_path / "gate.xml")
    assert root.get("failures") == "1" and root.get("skipped") == "1"
    failure = next(c for c in cases(root) if c.find("failure") is not None)
    assert failure.get("classname") == "gate.int2_tbe.synthetic.cpu.bs4096"
    assert failure.find("failure").get("type") == "job-error"
    skip = next(c for c in cases(root) if c.find("skipped") is not None)
    assert skip.find("skipped").get("message") == "job skipped: no CUDA device"
    md = (tmp_path / "gate.md").read_text()
    assert "int2_tbe synthetic/cpu bs=4096: job" in md
    assert "⏭ skipped" in md


def test_only_skipped_rows_pass():
    result = evaluate_gate(frame(row("uint4", status="skipped", error="no GPU")), load_gate_config())
    assert result.exit_code == 0 and result.counts[SKIPPED] == 1


def test_backend_without_rules_gets_the_default_rules_and_says_so():
    cfg = load_gate_config()
    assert "my_backend" not in cfg.rules and cfg.default_rules == RuleSet(max_auc_drop=0.001)  # the reader's budget, compare.max_auc_drop
    [v] = evaluate_gate(frame(row("my_backend")), cfg).verdicts
    assert (v.rule, v.verdict) == ("max_auc_drop", PASS) and "[gate.default_rules: no gate.rules.my_backend]" in v.reason
    [v] = evaluate_gate(frame(row("my_backend", delta=-0.02)), cfg).verdicts  # a drop of 0.02 > 0.001
    assert v.verdict == FAIL and "default_rules" in v.reason


def test_rules_all_off_pass_visibly():
    cfg = gate(my_backend={})
    [v] = evaluate_gate(frame(row("my_backend")), cfg).verdicts
    assert v.verdict == PASS and v.rule == JOB and "every rule is off" in v.reason and "gate.rules.my_backend" in v.reason
    [v] = evaluate_gate(frame(row("other")), cfg).verdicts  # schema default: no default rules either
    assert v.verdict == PASS and "gate.default_rules" in v.reason


def test_bad_tables_are_user_errors():
    with pytest.raises(UserError, match="lacks columns"):
        evaluate_gate(pd.DataFrame({"backend": ["fp32"]}), load_gate_config())
    with pytest.raises(UserError, match="empty"):
        evaluate_gate(pd.DataFrame(columns=COLUMNS), load_gate_config())
    with pytest.raises(UserError, match="unknown status"):
        evaluate_gate(frame(row("fp32", status="weird")), load_gate_config())


# --- writers --------------------------------------------------------------------------------


def test_step_summary_is_appended(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run_gate(healthy(), load_gate_config(), tmp_path / "out")
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "**Gate: PASS**" in text


def test_markdown_and_xml_survive_hostile_error_text(tmp_path):
    bad = "pipe | in text\x1b[31m and <xml> & control chars\x00"
    df = frame(row("uint4", status="error", error=bad))
    assert run_gate(df, load_gate_config(), tmp_path) == 1
    root = parse_junit(tmp_path / "gate.xml")  # parses: control characters were replaced
    assert "<xml> &" in root.find(".//failure").get("message")
    row_line = next(line for line in (tmp_path / "gate.md").read_text().splitlines() if "uint4" in line and line.startswith("|"))
    assert "pipe \\| in text" in row_line


# --- CLI: stored records, stored config -----------------------------------------------------


def write_report(tmp_path: Path, df: pd.DataFrame) -> Path:
    """A report folder holding only records.jsonl (no results.csv: the gate reads records)."""
    return write_records(tmp_path / "report", df)


def test_cli_passes_on_healthy_records(tmp_path, capsys):
    report = write_report(tmp_path, healthy())
    assert cli_main([str(report)]) == 0
    assert (report / "gate.md").is_file() and (report / "gate.xml").is_file()
    assert not (report / "results.csv").exists()
    assert read_settings(report / GATE_CONFIG).gate == load_gate_config()  # a first verdict stores its config
    assert "Gate: PASS" in capsys.readouterr().out


def test_cli_fails_with_an_override(tmp_path, capsys):
    report = write_report(tmp_path, healthy())
    assert cli_main([str(report), "gate.rules.int8_tbe.min_speedup=100"]) == 1
    out = capsys.readouterr().out
    assert "Gate: FAIL" in out and "int8_tbe" in out


def test_cli_overrides_may_come_after_the_options(tmp_path):
    report = write_report(tmp_path, healthy())
    assert cli_main([str(report), "--out", str(tmp_path / "out"), "gate.rules.int8_tbe.min_speedup=100"]) == 1


def test_cli_reads_the_committed_fixture(tmp_path):
    report = tmp_path / "report"
    report.mkdir()
    shutil.copy(Path(__file__).parent / "fixtures" / "gate" / "records.jsonl", report)
    assert cli_main([str(report)]) == 1  # the fixture holds one errored job
    root = parse_junit(report / "gate.xml")
    assert root.get("failures") == "1" and root.get("skipped") == "1"


def test_cli_follows_latest(tmp_path):
    write_records(tmp_path / "nightly" / "20250101-000000", healthy())
    (tmp_path / "nightly" / "latest").symlink_to("20250101-000000")
    assert cli_main([str(tmp_path / "nightly")]) == 0
    assert (tmp_path / "nightly" / "20250101-000000" / "gate.md").is_file()


def sweep_gate(tmp_path: Path, *overrides: str) -> Path:
    """What `python -m bench +sweep=nightly OVERRIDES` leaves: records, the stored config, the verdict."""
    report = write_report(tmp_path, healthy())
    assert gate_sweep(report, load_gate_config("default", overrides), {}) in (0, 1)
    return report


def test_sweep_stores_its_config_beside_the_verdict(tmp_path):
    report = sweep_gate(tmp_path, "gate.rules.int8_tbe.min_speedup=100")
    assert read_settings(report / GATE_CONFIG).gate.rules["int8_tbe"].min_speedup == 100.0
    assert "**Gate: FAIL**" in (report / "gate.md").read_text()


def test_rejudging_with_no_overrides_reproduces_the_stored_verdict(tmp_path, capsys):
    report = sweep_gate(tmp_path, "gate.rules.int8_tbe.min_speedup=100")
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    assert cli_main([str(report)]) == 1  # not the default rules' PASS
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before  # gate.md rewritten identical, nothing new
    assert "Gate: FAIL" in capsys.readouterr().out


@pytest.mark.slow
def test_overrides_write_a_new_verdict_beside_the_stored_one(tmp_path, capsys):
    report = sweep_gate(tmp_path, "gate.rules.int8_tbe.min_speedup=100")
    stored_md = (report / "gate.md").read_text()
    assert cli_main([str(report), "gate.rules.int8_tbe.min_speedup=null", "compare.alpha=0.1"]) == 0
    assert (report / "gate.md").read_text() == stored_md  # never overwritten
    [new_md] = [p for p in report.glob("gate-*.md")]
    stem = new_md.stem
    assert (report / f"{stem}.xml").is_file() and read_settings(report / f"{stem}.yaml").compare.alpha == 0.1
    text, out = new_md.read_text(), capsys.readouterr().out
    assert "**Gate: PASS**" in text.splitlines()[2] and "Not the stored verdict" in text
    for shown in (text, out):
        assert "gate.rules.int8_tbe.min_speedup" in shown and "100.0 -> None" in shown
        assert "compare.alpha" in shown and "0.05 -> 0.1" in shown
        assert "int8_tbe synthetic/cpu bs=512" in shown and "fail -> absent" in shown
    # the new verdict's config reproduces it; the stored one still reproduces gate.md
    assert cli_main([str(report), "--config", str(report / f"{stem}.yaml")]) == 0
    assert cli_main([str(report)]) == 1 and (report / "gate.md").read_text() == stored_md


def test_an_override_that_changes_verdicts_lists_them(tmp_path):
    report = sweep_gate(tmp_path)
    done = rejudge(report, ["gate.rules.uint4.max_auc_drop=-0.01"])
    assert not done.stored and done.result.exit_code == 1
    assert [c for c in done.changes if c.startswith("verdict")] == [
        f"verdict uint4 synthetic/cpu bs={bs} `max_auc_drop`: pass -> fail ({r})"
        for bs, r in sorted((v.batch_size, v.reason) for v in done.result.failures)]


def test_a_report_without_a_stored_config_keeps_its_gate_md(tmp_path):
    report = write_report(tmp_path, healthy())
    (report / "gate.md").write_text("# an older harness's verdict: FAIL\n")
    done = rejudge(report)
    assert not done.stored and (report / "gate.md").read_text() == "# an older harness's verdict: FAIL\n"
    assert "no stored gate config" in done.changes[0] and done.md.name.startswith("gate-")


def test_a_harness_that_judges_differently_does_not_overwrite(tmp_path):
    report = sweep_gate(tmp_path)
    (report / "gate.md").write_text((report / "gate.md").read_text().replace("PASS", "FAIL", 1))
    done = rejudge(report)
    assert not done.stored and "judges the same records differently" in done.changes[-1]
    assert "FAIL" in (report / "gate.md").read_text()


def test_deleted_gate_md_is_rewritten_from_the_stored_config(tmp_path):
    report = sweep_gate(tmp_path, "gate.rules.int8_tbe.min_speedup=100")
    stored_md = (report / "gate.md").read_text()
    (report / "gate.md").unlink()
    assert cli_main([str(report)]) == 1 and (report / "gate.md").read_text() == stored_md


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "no such file or directory"),
    (["{empty}"], "no records.jsonl"),
    (["{report}", "gate.rules.uint4.nope=1"], "bad gate config or override"),
    (["{report}", "compare.alpha=2"], "compare.alpha must be between 0 and 1"),
    (["{report}", "--config", "nonexistent"], "no gate config"),
    (["{garbage}"], "not a bench run record"),
    (["{bad_stored}"], "bad stored gate config"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    report = write_report(tmp_path, healthy())
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "records.jsonl").write_text('{"schema_version": 2, "a": 1}\n')
    empty = tmp_path / "empty"
    empty.mkdir()
    bad_stored = write_records(tmp_path / "bad_stored", healthy())
    (bad_stored / GATE_CONFIG).write_text("gate:\n  rules:\n    uint4:\n      min_sped: 1\ncompare: {}\n")
    paths = {"missing": tmp_path / "nowhere", "report": report, "garbage": garbage, "empty": empty, "bad_stored": bad_stored}
    assert cli_main([a.format(**paths) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("bench.gate: error:")


@pytest.mark.slow
def test_python_dash_m_bench_gate_exit_codes(tmp_path):
    import os
    import subprocess

    report = write_report(tmp_path, healthy(batch_sizes=(512,)))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("GITHUB_STEP_SUMMARY", None)
    run = lambda *a: subprocess.run([sys.executable, "-m", "bench.gate", str(report), *a], capture_output=True, text=True, env=env)  # noqa: E731
    ok, bad, broken = run(), run("gate.rules.int8_tbe.min_speedup=100"), run("gate.rules.nope")
    assert (ok.returncode, bad.returncode, broken.returncode) == (0, 1, 2), broken.stderr
    assert "Gate: FAIL" in bad.stdout and "int8_tbe" in bad.stdout and "not the stored verdict" in bad.stdout
    assert broken.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "text,says",
    [
        ("gate: [unclosed\n", "not valid YAML at line 2, column 1"),
        ("gate: !!python/object/apply:os.system ['echo pwned']\ncompare: {}\n", "only plain YAML is read (no tags such as !!python)"),
        ("gates:\n  rules: {}\ncompare: {}\n", "unknown key(s) gates; it holds only gate and compare"),
        ("gate:\n  rules: {}\n  bogus: 1\ncompare: {}\n", "Key 'bogus' not in 'GateConfig'"),
        ("[1, 2]\n", "not a mapping with the keys gate and compare"),
        (b"\xff\xfe garbage", "not a UTF-8 text file"),
    ],
)
@pytest.mark.slow
def test_a_damaged_stored_gate_config_is_one_line_and_exit_2(tmp_path, capsys, text, says):
    report = sweep_gate(tmp_path)
    stored = report / GATE_CONFIG
    stored.write_bytes(text if isinstance(text, bytes) else text.encode())
    before = (report / "gate.md").read_bytes()
    assert cli_main([str(report)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "bad stored gate config" in err
    assert (report / "gate.md").read_bytes() == before and not list(report.glob("gate-*"))  # no verdict blames the harness

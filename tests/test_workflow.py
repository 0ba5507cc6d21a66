"""The nightly GitHub workflow parses and has the steps the nightly gate relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "nightly.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def steps(workflow) -> list[dict]:
    [job] = workflow["jobs"].values()
    return job["steps"]


def uses(steps: list[dict], action: str) -> list[dict]:
    return [s for s in steps if s.get("uses", "").split("@")[0] == action]


def index(steps: list[dict], step: dict) -> int:
    return next(i for i, s in enumerate(steps) if s is step)


def test_triggers_nightly_and_by_hand(workflow):
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` key as True
    [schedule] = on["schedule"]
    fields = schedule["cron"].split()
    assert len(fields) == 5 and fields[2:] == ["*", "*", "*"]  # once a day
    assert "workflow_dispatch" in on


def test_runs_on_cpu_with_python_311(workflow, steps):
    [job] = workflow["jobs"].values()
    assert "ubuntu" in job["runs-on"]
    [setup] = uses(steps, "actions/setup-python")
    assert str(setup["with"]["python-version"]) == "3.11"
    assert index(steps, uses(steps, "actions/checkout")[0]) == 0


def test_caches_venv_and_checkpoints(steps):
    caches = {s["with"]["path"]: s for s in uses(steps, "actions/cache")}
    venv = caches[".venv"]["with"]["key"]
    assert "hashFiles('pyproject.toml', 'requirements/*.txt')" in venv
    assert ".cache/bench" in caches


def test_setup_then_the_bench_command_whose_exit_code_fails_the_job(steps):
    runs = [s for s in steps if "run" in s]
    setup = next(s for s in runs if "make setup" in s["run"])
    bench = next(s for s in runs if ".venv/bin/python -m bench +sweep=nightly" in s["run"])
    assert index(steps, setup) < index(steps, bench)
    assert "continue-on-error" not in bench and "|| true" not in bench["run"]
    assert index(steps, uses(steps, "actions/cache")[0]) < index(steps, setup)


def test_uploads_reports_always(steps):
    [upload] = [s for s in uses(steps, "actions/upload-artifact") if s["with"]["path"].rstrip("/") == "reports"]
    assert upload["if"] == "always()"
    bench = next(s for s in steps if "+sweep=nightly" in s.get("run", ""))
    assert index(steps, bench) < index(steps, upload)


def test_history_survives_between_nights(steps):
    [restore] = uses(steps, "actions/cache/restore")
    [save] = uses(steps, "actions/cache/save")
    assert restore["with"]["path"] == save["with"]["path"] == "reports/history.jsonl"
    assert save["if"] == "always()"
    assert "bench-history-" in restore["with"]["restore-keys"]


def test_publishes_the_dashboard_over_the_history(steps):
    bench = next(s for s in steps if "+sweep=nightly" in s.get("run", ""))
    dashboard = next(s for s in steps if "-m bench dashboard reports" in s.get("run", ""))
    assert dashboard["if"] == "always()" and index(steps, bench) < index(steps, dashboard)
    [upload] = [s for s in uses(steps, "actions/upload-artifact") if s["with"]["path"].rstrip("/") == "reports/dashboard"]
    assert upload["if"] == "always()" and index(steps, dashboard) < index(steps, upload)

"""The dashboard in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright opens
the page with the network off, and the charts it drew have the expected series, points and steps.

Skips, saying why, where no Chromium or no Playwright exists. The screenshot goes to the test's
folder, and also to $BENCH_SCREENSHOT_DIR when set. With $BENCH_DASHBOARD_REPORTS set to a reports
folder of real nightly runs, that folder's page is opened and checked too (each chart drawn, the
planted step marked).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench.config import CompareConfig
from bench.report.dashboard import build_site
from tests.support.dashboard import browser_reason, open_page, planted_history

pytestmark = pytest.mark.skipif(browser_reason() is not None, reason=str(browser_reason()))


def _keep(screenshot: Path) -> None:
    if os.environ.get("BENCH_SCREENSHOT_DIR"):
        Path(os.environ["BENCH_SCREENSHOT_DIR"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(os.environ["BENCH_SCREENSHOT_DIR"]) / screenshot.name)


@pytest.mark.slow
def test_charts_render_with_their_series_points_failures_and_the_planted_step(tmp_path):
    planted_history(tmp_path / "reports", runs=5, slow_run=4, slowdown=0.2, failing_run=2)
    index, summary = build_site(tmp_path / "reports", tmp_path / "site", CompareConfig())
    charts = {c["id"].rsplit("-", 1)[-1]: c for c in open_page(index, tmp_path / "dashboard-planted.png")}
    _keep(tmp_path / "dashboard-planted.png")
    assert set(charts) == {"speedup", "throughput", "auc_delta", "memory"}
    expected_series = {"speedup": ["int8_tbe bs=1024"], "throughput": ["fp32 bs=1024", "int8_tbe bs=1024"],
                       "auc_delta": ["int8_tbe bs=1024"], "memory": ["fp32 bs=1024", "int8_tbe bs=1024"]}
    for name, chart in charts.items():
        assert [s["name"] for s in chart["series"]] == expected_series[name]
        assert all(s["points"] == 5 and s["links"] == 5 for s in chart["series"])
        assert chart["drawn"] == len(chart["series"]) + (1 if chart["steps"] else 0)  # every trace drawn in the SVG
    # the run whose gate failed (int8_tbe's AUC) is a red cross on int8_tbe's series
    assert [s["crosses"] for s in charts["auc_delta"]["series"]] == [1]
    assert charts["throughput"]["steps"] == 1 and charts["speedup"]["steps"] == 1
    assert charts["memory"]["steps"] == 0
    assert (tmp_path / "dashboard-planted.png").stat().st_size > 10_000


@pytest.mark.skipif(not os.environ.get("BENCH_DASHBOARD_REPORTS"), reason="BENCH_DASHBOARD_REPORTS (a folder of real nightly runs) not set")
def test_a_real_reports_folder():
    reports = Path(os.environ["BENCH_DASHBOARD_REPORTS"])
    index, summary = build_site(reports, reports / "dashboard", CompareConfig())
    shot = reports / "dashboard" / "dashboard.png"
    charts = open_page(index, shot)
    _keep(shot)
    assert charts and all(c["drawn"] >= len(c["series"]) > 0 for c in charts)
    assert any(c["steps"] for c in charts if c["id"].endswith("throughput")), summary["steps"]

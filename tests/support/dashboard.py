"""A nightly history with a planted slowdown, written the way the nightly writes it, and a headless
browser for the dashboard's page.

`planted_history` stores, for each of `runs` nights, a report folder (`<reports>/nightly/<run>/`
with its records.jsonl and a report.md) and appends the night to `<reports>/history.jsonl` through
`bench.gate.stored.gate_sweep`, the nightly's own gate-and-history step. Night `slow_run` and the
nights after it have int8_tbe's throughput cut by `slowdown` (its per-trial throughputs with it).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from bench.config import CompareConfig
from bench.gate.thresholds import load_gate_config
from bench.gate.stored import gate_sweep, history_fields
from bench.report.history import history_path, update_history
from bench.results.load import load_records

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "gate"))
from gate_frames import frame, row, write_records  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
# The flags the project's browser tests run Chromium with: headless, no sandbox (root in CI), and
# nothing that reaches the network.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def night(slow: float = 0.0, fail: bool = False):
    """One night's results: fp32 and int8_tbe at batch 1024; int8_tbe `slow` slower, or failing its AUC rule."""
    delta = -0.01 if fail else -0.0002
    return frame(row("fp32", batch_size=1024),
                 row("int8_tbe", batch_size=1024, delta=delta, half=0.0002, speedup=1.8 * (1 - slow)))


def with_probes(folder: Path) -> Path:
    """The folder's records with the machine probes each job takes at its start and end (the reference GEMM
    and gather, µs: the same quiet machine every night), as a nightly's records carry them."""
    path = folder / "records.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    reading = {f"{p}_{c}_us": t for p, t in (("gemm", 1300.0), ("gather", 200.0)) for c in ("cpu", "wall")}
    for r in records:
        if r["status"] == "ok":
            r["metrics"]["machine"] = {"reference_start": dict(reading), "reference_end": dict(reading)}
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def planted_history(reports: Path, runs: int = 5, slow_run: int = 4, slowdown: float = 0.2, failing_run: int | None = None) -> Path:
    """`reports/history.jsonl` over `runs` nights (0-based `slow_run` is the first slow one); returns it."""
    for i in range(runs):
        folder = with_probes(write_records(reports / "nightly" / f"2026010{i + 1}-022300",
                                           night(slowdown if i >= slow_run else 0.0, fail=i == failing_run)))
        (folder / "report.md").write_text(f"# nightly run {i + 1}\n")
        gate_sweep(folder, load_gate_config(), CompareConfig())  # as a nightly does: the verdict, then the history
        update_history(load_records(folder), history_path(None, reports), CompareConfig(), run_id=f"run{i + 1}",
                       **history_fields(folder))
    return reports / "history.jsonl"


def browser_reason() -> str | None:
    """Why no browser test can run here, or None."""
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium; .ci/run installs it where it can)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (Python) is not installed: pip install playwright (the dev extra has it)"
    return None


# In the page: per chart, its series (name and number of points with a value) and its marked steps.
CHARTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
  id: gd.id,
  series: gd.data.filter(t => t.meta && t.meta.kind === 'series').map(t => ({name: t.name, points: t.y.filter(v => v !== null).length,
          crosses: (t.marker.symbol || []).filter(s => s === 'x').length, links: (t.customdata || []).filter(Boolean).length})),
  steps: gd.data.filter(t => t.meta && t.meta.kind === 'steps').map(t => t.x.length).reduce((a, b) => a + b, 0),
  drawn: gd.querySelectorAll('.scatterlayer .trace').length,
}))"""


def open_page(index: Path, screenshot: Path) -> list[dict]:
    """Open `index` in headless Chromium with the network off, save a full-page screenshot, return CHARTS_JS's answer."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                                    args=CHROMIUM_FLAGS, headless=True)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1400, "height": 900})
            requests: list[str] = []
            page = context.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.goto(index.resolve().as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
            charts = page.evaluate(CHARTS_JS)
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    outside = [u for u in requests if not u.startswith("file:")]
    assert not outside, f"the page asked the network for {outside}"
    return charts

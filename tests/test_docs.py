"""The documentation site (mkdocs.yml over docs/): every page is in the nav, and `mkdocs build --strict`
(what .ci/run runs) passes, so a broken link or anchor fails here first."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO


def nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        for value in (item.values() if isinstance(item, dict) else [item]):
            out += nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))
    assert sorted(nav_pages(config["nav"])) == pages


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None, reason="mkdocs is not installed (the dev extra has it)")
def test_site_builds_strictly(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    out = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "torchao" / "index.html").is_file()


def test_no_table_is_cut_by_a_blank_line():
    """A blank line inside a markdown table ends it: the rows after it render as a paragraph (docs/backends.md's
    ps_redis row once did). A table row right after a blank line must start a table (a header and its rule)."""
    cut = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        lines = page.read_text().splitlines()
        for n in range(1, len(lines) - 1):
            after_blank_row = lines[n].startswith("|") and lines[n - 1].strip() == "" and n >= 2 and lines[n - 2].startswith("|")
            if after_blank_row and not lines[n + 1].lstrip("| ").startswith("---"):
                cut.append(f"{page.name}:{n + 1}")
    assert not cut, cut

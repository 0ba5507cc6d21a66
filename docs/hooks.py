"""mkdocs hooks (mkdocs.yml `hooks:`): pages that are written from the code when the site is built."""

from __future__ import annotations

MARKER = "<!-- vocabulary: the table of bench/metrics.py, written in at build time by docs/hooks.py -->"


def vocabulary_table() -> str:
    """The metric vocabulary as a markdown table, one row per declared metric."""
    from bench.metrics import METRICS, hi, lo

    rows = ["| metric | unit | better | stage | what it is |", "| --- | --- | --- | --- | --- |"]
    for m in METRICS.values():
        name = f"`{m.name}`" + (f" (`{lo(m.name)}`, `{hi(m.name)}`)" if m.interval else "")
        rows.append(f"| {name} | {m.unit} | {m.better or '—'} | {m.stage} | {m.description} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, vocabulary_table()) if MARKER in markdown else markdown

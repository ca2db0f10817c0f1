"""The docs tier's summary line: how many documentation blocks ran and how many were skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.doc_blocks import read_blocks

ROOT = Path(__file__).resolve().parents[2]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print ``docs-test: N blocks run, M skipped (reasons)`` when the docs tests were collected."""
    if not any("tests/docs/" in r.nodeid for rs in terminalreporter.stats.values() for r in rs if hasattr(r, "nodeid")):
        return
    run = skipped = 0
    reasons: dict[str, int] = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        try:
            blocks = read_blocks(doc)
        except ValueError:
            continue  # reported by the test of that doc
        for b in blocks:
            if b.lang not in ("bash", "python"):
                continue
            if b.skip is None:
                run += 1
            else:
                skipped += 1
                reasons[b.skip] = reasons.get(b.skip, 0) + 1
    terminalreporter.write_line(f"docs-test: {run} blocks run, {skipped} skipped")
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {n} × skip: {reason}")

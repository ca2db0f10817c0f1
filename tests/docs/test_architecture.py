"""docs/architecture.md names every module of workbench/, so the map of the code stays whole."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_architecture_names_every_module() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "workbench").rglob("*.py"))
        if p.name != "__init__.py" and p.name not in doc
    ]
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)

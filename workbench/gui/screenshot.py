"""Render the window offscreen to PNG files for the documentation.

Usage::

    QT_QPA_PLATFORM=offscreen python -m workbench.gui.screenshot docs/screenshots

writes ``main_window.png`` (resnet18 with layer1–layer3 frozen, layer4 at LR × 0.1 with A+B
on its last block, fc trainable, a finding in the cost panel) and ``filter.png`` (the tree
filtered by a search). Settings go to a
temporary folder, so the user's recent files and geometry are neither used nor changed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Sequence

__all__ = ["render", "main"]


def render(out_dir: str | Path, size: tuple[int, int] = (1400, 850)) -> list[Path]:
    """Render the screenshots.

    Args:
        out_dir: destination folder (created if needed).
        size: window size in pixels.

    Returns:
        The written files.
    """
    from PySide6.QtCore import QCoreApplication, QEvent, QSettings
    from PySide6.QtWidgets import QApplication

    from workbench.core.atomic import atomic_path
    from workbench.gui.app import create_application
    from workbench.gui.features import has_reparam
    from workbench.gui.main_window import MainWindow
    from workbench.gui.plan_edits import A_PLUS_B
    from workbench.gui.tree_model import Column

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tmp)
        app = create_application()
        app.setStyle("Fusion")
        window = MainWindow()
        window.resize(*size)
        window.show()
        c = window.controller
        c.set_value(["layer1", "layer2", "layer3"], "frozen", True, "Freeze layer1–layer3")
        c.set_value(["layer4"], "lr_scale", 0.1)
        if has_reparam():
            c.set_value(["layer4.1"], "reparam", dict(A_PLUS_B))
        c.set_value(["conv1"], "frozen", True)
        c.set_value(["bn1"], "frozen", True)
        c.set_value(["bn1"], "bn_eval", False)  # a pitfall, so the cost panel shows a finding
        for path in ("layer1", "layer1.0", "layer4", "layer4.1"):
            window.view.expand(window.proxy.mapFromSource(window.tree_model.index_of(path)))
        window.select_path("layer1.0.conv1")
        app.processEvents()

        def grab(name: str) -> None:
            for _ in range(3):
                app.processEvents()
            path = out / name
            with atomic_path(path) as tmp_png:
                window.grab().save(str(tmp_png), "PNG")
            path.chmod(0o644)  # the temporary file was created private (mkstemp)
            written.append(path)

        grab("main_window.png")
        window.filter_edit.setText("bn")
        window.view.scrollTo(window.proxy.index(0, Column.MODULE))
        grab("filter.png")
        window.filter_edit.clear()
        c.undo_stack.setClean()
        window.close()
        window.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        del window
        QApplication.processEvents()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m workbench.gui.screenshot [OUT_DIR]``.

    Args:
        argv: arguments (default: ``sys.argv[1:]``).

    Returns:
        0.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    for p in render(args[0] if args else "docs/screenshots"):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())

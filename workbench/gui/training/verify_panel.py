"""The Verify tab: the end-of-run proof that the plan held, module by module.

After a run, :meth:`AppliedPlan.verify` (run by the engine) has hashed every frozen tensor,
every fixed ``A`` of A+B and the running statistics of BatchNorm kept in eval, before and
after training. This panel shows its report: a green or red line, then the model's modules
as a tree, each green (all its tensors as the plan says), orange (a trainable tensor that did
not change or got no gradient, after a short run) or red (a frozen tensor or eval-BatchNorm
statistics that changed; after a long run, a trainable tensor that never got a gradient,
stopped getting them or never changed), with what went wrong, by tensor name. A run that took
no optimizer step says that nothing trained, never "OK". Clicking a module selects it in the
module tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QIcon
from PySide6.QtWidgets import QHeaderView, QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from workbench.core.runs.record import RunRecord
from workbench.gui.icons import dot_icon
from workbench.gui.theme import palette_changed, tone

__all__ = ["EMPTY_TEXT", "STATUS_COLORS", "VerifyPanel", "status_icon"]

#: Colours of module results.
STATUS_COLORS = {"ok": QColor(46, 160, 67), "warning": QColor(230, 140, 0), "error": QColor(210, 40, 40)}
_RANK = {"ok": 0, "warning": 1, "error": 2}
_WORDS = {"ok": "as planned", "warning": "did not change", "error": "changed"}
#: What a module's worst finding says in its Result column, by the finding's kind.
_KIND_WORDS = {
    "trainable_unchanged": "did not change",
    "trainable_no_grad": "no gradient",
    "trainable_grad_stopped": "stopped training",
    "plan_not_in_force": "plan not in force",
    "bn_stats_changed": "statistics moved",
}
_TRAINABLE_KINDS = ("trainable_unchanged", "trainable_no_grad", "trainable_grad_stopped")


def status_icon(status: str) -> QIcon:
    """A filled circle in the status colour.

    Args:
        status: ``ok``, ``warning`` or ``error``.

    Returns:
        The icon.
    """
    color = STATUS_COLORS.get(status, QColor(150, 150, 150))
    return dot_icon(color, outline=color.darker(120))


#: What the Verify tab says while it shows no report.
EMPTY_TEXT = "Verification appears here when a run ends."


class VerifyPanel(QWidget):
    """A run's verify report: a summary line and a module tree coloured by result.

    Signals:
        moduleActivated(path): a module row was clicked.

    Args:
        parent: Qt parent.
    """

    moduleActivated = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.banner = QLabel(EMPTY_TEXT, self)
        self.banner.setWordWrap(True)
        self.banner.setTextFormat(Qt.TextFormat.RichText)
        self.banner.setMargin(6)
        self.tree = QTreeWidget(self)
        self.tree.setHeaderLabels(["Module", "Result", "Details"])
        self.tree.setUniformRowHeights(True)
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        self.tree.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.header().setStretchLastSection(True)
        self.tree.setColumnWidth(0, 220)
        self.tree.itemClicked.connect(self._clicked)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.banner)
        layout.addWidget(self.tree, 1)
        self.status: dict[str, str] = {}
        #: the report passed (True), failed (False), or there is none or nothing trained (None)
        self.ok: bool | None = None
        #: the banner's colours: ``"ok"``, ``"warn"`` or ``"error"`` (:data:`~workbench.gui.theme.TONES`), or None
        self.banner_tone: str | None = None

    def _style_banner(self) -> None:
        """Colour the banner for its tone, in the colours of the palette it is drawn with."""
        style = ""
        if self.banner_tone is not None:
            background, text = tone(self.banner_tone, self.palette())
            style = f"background:{background}; color:{text}; border-radius:4px"
        if style != self.banner.styleSheet():
            self.banner.setStyleSheet(style)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if palette_changed(event):
            self._style_banner()  # a theme switched with a report shown

    def clear(self) -> None:
        """Show no report (a new model: the old model's modules are not listed)."""
        self.show_report(None, EMPTY_TEXT)

    def show_run(self, record: RunRecord) -> None:
        """Show the verify report of a run (or why there is none).

        Args:
            record: the run.
        """
        if record.verify is None:
            self.show_report(None, f"{record.name}: no verification ({record.message or record.status})")
        else:
            self.show_report(record.verify, record.name)

    def show_report(self, report: Mapping[str, Any] | None, title: str = "") -> None:
        """Show a report (``VerifyReport.to_dict()``).

        Args:
            report: the report, or None (the tree is emptied and ``title`` shown).
            title: what the report is of.
        """
        self.tree.clear()
        self.status = {}
        if report is None:
            self.ok = None
            self.banner.setText(title or "No verification.")
            self.banner_tone = None
            self._style_banner()
            return
        self.ok = bool(report.get("ok"))
        checked = report.get("checked") or {}
        violations = [v for v in (report.get("violations") or []) if isinstance(v, Mapping)]
        errors = [v for v in violations if v.get("severity") == "error"]
        warnings = [v for v in violations if v.get("severity") != "error"]
        untrained_errors = [v for v in errors if v.get("kind") in _TRAINABLE_KINDS]
        what = (
            f"{checked.get('frozen', 0)} frozen tensors, {checked.get('fixed', 0)} fixed tensors (A of A+B, frozen slices), "
            f"{checked.get('bn_stats', 0)} eval-BatchNorm buffers and {checked.get('trainable', 0)} trainable tensors checked"
        )
        if report.get("trained") is False and self.ok:  # never "OK": nothing trained
            self.ok = None
            head = "⚠ Nothing trained: the run took no optimizer step (frozen tensors as planned)"
            self.banner_tone = "warn"
        elif self.ok:
            head = "✔ Verify OK: frozen tensors bit-identical, eval-BatchNorm statistics unchanged"
            if warnings:
                head += (f" ({len(warnings)} trainable tensor{'s' if len(warnings) != 1 else ''} "
                         "did not train as expected: see below)")
            self.banner_tone = "ok"
        else:
            parts = []
            if len(errors) > len(untrained_errors):
                n = len(errors) - len(untrained_errors)
                parts.append(f"{n} tensor{'s' if n != 1 else ''} changed that the plan keeps fixed")
            if untrained_errors:
                n = len(untrained_errors)
                parts.append(f"{n} trainable tensor{'s' if n != 1 else ''} did not train")
            head = f"✘ Verify FAILED: {', '.join(parts)}"
            self.banner_tone = "error"
        self.banner.setText(f"<b>{head}</b><br>{title + ': ' if title else ''}{what}.")
        self._style_banner()
        details: dict[str, list[str]] = {}
        worst: dict[str, tuple[int, str]] = {}  # per module: its worst finding's rank and kind
        for v in violations:
            module = str(v.get("module", ""))
            details.setdefault(module, []).append(f"{v.get('name')}: {v.get('message')}")
            rank = _RANK.get(str(v.get("severity")), 0)
            if module not in worst or rank > worst[module][0]:
                worst[module] = (rank, str(v.get("kind", "")))
        status = {str(k): str(s) for k, s in (report.get("module_status") or {}).items()}
        # ancestors take the worst status below them
        full: dict[str, str] = {}
        for path, s in status.items():
            parts = path.split(".") if path else []
            for i in range(len(parts) + 1):
                anc = ".".join(parts[:i])
                cur = full.get(anc)
                if cur is None or _RANK.get(s, 0) > _RANK.get(cur, 0):
                    full[anc] = s
        self.status = full
        items: dict[str, QTreeWidgetItem] = {}
        for path in sorted(full, key=lambda p: (p.count(".") if p else -1, p)):
            s = full[path]
            parent_path = path.rpartition(".")[0] if path else None
            if path == "":
                item = QTreeWidgetItem(self.tree)
                item.setText(0, "(model)")
            else:
                parent = items.get(parent_path if parent_path is not None else "")
                item = QTreeWidgetItem(parent if parent is not None else self.tree)
                item.setText(0, path.rpartition(".")[2] or path)
            item.setIcon(0, status_icon(s))
            if path in status:
                word = _KIND_WORDS.get(worst[path][1], _WORDS.get(s, s)) if path in worst else _WORDS.get(s, s)
            else:
                word = "ok" if s == "ok" else "see below"
            item.setText(1, word)
            item.setForeground(1, STATUS_COLORS.get(s, QColor(0, 0, 0)))
            item.setData(0, Qt.ItemDataRole.UserRole, path)
            item.setToolTip(0, path or "(model)")
            lines = details.get(path, [])
            if lines:
                item.setText(2, lines[0] + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""))
                item.setToolTip(2, "\n".join(lines))
            items[path] = item
        self.tree.collapseAll()
        root = items.get("")
        if root is not None:
            root.setExpanded(True)
        for path, item in items.items():  # open the way to every problem
            if full[path] != "ok":
                p = item.parent()
                while p is not None:
                    p.setExpanded(True)
                    p = p.parent()

    def _clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        path = item.data(0, Qt.ItemDataRole.UserRole)
        if isinstance(path, str):
            self.moduleActivated.emit(path)

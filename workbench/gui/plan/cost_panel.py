"""The cost panel: what the plan trains, what training it costs, and its pitfalls.

Everything comes from the controller's :class:`~workbench.gui.plan.state.PlanState`
(recomputed once per plan edit from the plan and the tree, never from the model):
parameter totals, bytes of parameters + gradients + optimizer state against full
fine-tuning, and one line per lint finding (double-click selects the module).

The dtype selector answers "does this plan fit on a 24 / 80 GB GPU": the same memory if the
weights were stored in fp32, bf16 or fp16 (:meth:`PlanState.memory
<workbench.gui.plan.state.PlanState.memory>`), with a mark per GPU size.

With an :class:`~workbench.gui.plan.activation_estimate.ActivationEstimator`
(:meth:`CostPanel.set_estimator`), one more line gives the next run's whole step: the
activations kept for backward at the training panel's batch size and image size under the
plan, the predicted peak against the device's memory, and after a run, predicted against
measured peak memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSizePolicy,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from workbench.core.formatting import fmt_bytes, fmt_count, fmt_percent
from workbench.core.models.memory import DTYPE_BYTES, GPU_SIZES, ParamMemory
from workbench.core.training.metrics import fmt_memory
from workbench.gui.controller import OPTIMIZER_LABELS, Controller
from workbench.gui.plan.state import finding_line

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.freezing.apply import Counts

__all__ = ["CostPanel", "MemoryBar", "fit_text"]

#: Colours of the fits / does-not-fit marks.
#: Trees with more modules than this lint the plan a moment after a click (coalesced while
#: clicks follow each other), so the tree and the counts answer at once.
DEFER_FINDINGS_ABOVE = 2000
#: How long after the last edit the findings of a large tree are read again.
FINDINGS_DELAY_MS = 150
FIT_COLORS = {True: QColor(46, 160, 67), False: QColor(200, 50, 50)}

#: Segment colours of the memory bar: parameters, gradients, optimizer state, fixed A.
SEGMENT_COLORS = {
    "params": QColor(120, 130, 145),
    "grads": QColor(52, 120, 198),
    "optimizer": QColor(232, 145, 45),
    "fixed": QColor(140, 90, 180),
}


class MemoryBar(QWidget):
    """A bar as wide as full fine-tuning's memory, filled with what the plan needs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._counts: Counts | None = None
        self.setMinimumHeight(14)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(260, 14)

    def set_counts(self, counts: Counts | None) -> None:
        """Show ``counts`` (None clears the bar)."""
        self._counts = counts
        if counts is not None:
            self.setToolTip(
                "Memory for training, as a share of full fine-tuning "
                f"({fmt_bytes(counts.full_ft_bytes)}):\n"
                f"  parameters {fmt_bytes(counts.param_bytes)}\n"
                f"  gradients {fmt_bytes(counts.grad_bytes)}\n"
                f"  optimizer state {fmt_bytes(counts.optimizer_bytes)}"
                + (f"\n  fixed A of A+B {fmt_bytes(counts.fixed_bytes)}" if counts.fixed_bytes else "")
            )
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        pal = self.palette()
        p.setPen(pal.color(QPalette.ColorRole.Mid))
        p.setBrush(pal.color(QPalette.ColorRole.Base))
        p.drawRoundedRect(r, 3, 3)
        c = self._counts
        if c is None or c.full_ft_bytes <= 0:
            p.end()
            return
        scale = r.width() / max(c.full_ft_bytes, c.training_bytes)
        x = r.left()
        p.setPen(Qt.PenStyle.NoPen)
        for key, value in (
            ("params", c.param_bytes),
            ("grads", c.grad_bytes),
            ("optimizer", c.optimizer_bytes),
            ("fixed", c.fixed_bytes),
        ):
            w = value * scale
            if w <= 0:
                continue
            p.setBrush(SEGMENT_COLORS[key])
            p.drawRect(QRectF(x, r.top() + 1, w, r.height() - 2))
            x += w
        p.end()


def fit_text(est: ParamMemory, rich: bool = True) -> str:
    """One line on a memory estimate: its total and whether it fits each GPU size.

    Args:
        est: the estimate.
        rich: colour the marks (HTML) instead of plain text.

    Returns:
        ``"bf16: 14.7 GB · 24 GB ✓ · 80 GB ✓"`` (✗ where it does not fit).
    """
    marks = []
    for size in GPU_SIZES:
        ok = est.fits(size)
        mark = "✓" if ok else "✗"
        if rich:
            mark = f'<span style="color:{FIT_COLORS[ok].name()}">{mark}</span>'
        marks.append(f"{size // 10**9} GB {mark}")
    total = f"<b>{fmt_bytes(est.total_bytes)}</b>" if rich else fmt_bytes(est.total_bytes)
    return f"{est.dtype}: {total} · " + " · ".join(marks)


def _legend(text: str, color: QColor) -> str:
    return f'<span style="color:{color.name()}">■</span> {text}'


class CostPanel(QFrame):
    """Parameter totals, training memory for the chosen optimizer, and findings.

    Signals:
        findingActivated(path): a finding was double-clicked; ``path`` is its module.

    Args:
        controller: source of the plan state; the optimizer box sets its optimizer.
        parent: Qt parent.
    """

    findingActivated = Signal(str)

    def __init__(self, controller: Controller, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._c = controller
        self.setFrameShape(QFrame.Shape.StyledPanel)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(8, 6, 8, 6)
        outer.setSpacing(12)

        stats = QWidget(self)
        grid = QGridLayout(stats)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(3)
        self.params_label = QLabel(stats)
        self.params_label.setTextFormat(Qt.TextFormat.RichText)
        self.memory_label = QLabel(stats)
        self.memory_label.setTextFormat(Qt.TextFormat.RichText)
        self.saving_label = QLabel(stats)
        self.saving_label.setTextFormat(Qt.TextFormat.RichText)
        self.legend_label = QLabel(stats)
        self.legend_label.setTextFormat(Qt.TextFormat.RichText)
        self.bar = MemoryBar(stats)
        self.optimizer_box = QComboBox(stats)
        for key, label in OPTIMIZER_LABELS.items():
            self.optimizer_box.addItem(label, key)
        self.optimizer_box.setToolTip("Optimizer whose state is counted (AdamW/Adam: 2 tensors per parameter)")
        self.dtype_box = QComboBox(stats)
        for key in DTYPE_BYTES:
            self.dtype_box.addItem(key, key)
        self.dtype_box.setToolTip("Weights dtype of the GPU estimate: does the plan fit on a 24 / 80 GB GPU?")
        self.fit_label = QLabel(stats)
        self.fit_label.setTextFormat(Qt.TextFormat.RichText)
        opt_row = QHBoxLayout()
        opt_row.setSpacing(6)
        opt_row.addWidget(QLabel("Optimizer", stats))
        opt_row.addWidget(self.optimizer_box)
        opt_row.addWidget(QLabel("GPU fit in", stats))
        opt_row.addWidget(self.dtype_box)
        opt_row.addWidget(self.fit_label)
        opt_row.addStretch(1)
        grid.addWidget(self.params_label, 0, 0, 1, 2)
        grid.addWidget(self.memory_label, 1, 0, 1, 2)
        grid.addWidget(self.bar, 2, 0)
        grid.addWidget(self.saving_label, 2, 1)
        grid.addWidget(self.legend_label, 3, 0, 1, 2)
        grid.addLayout(opt_row, 4, 0, 1, 2)
        self.activation_label = QLabel(stats)
        self.activation_label.setTextFormat(Qt.TextFormat.RichText)
        self.activation_label.setWordWrap(True)
        # three lines, always: the prediction and a finished run's line never grow the panel
        # (and shrink the plots beside it); hidden, it keeps its room
        self.activation_label.setFixedHeight(3 * self.activation_label.fontMetrics().lineSpacing() + 2)
        self.activation_label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        keep = self.activation_label.sizePolicy()
        keep.setRetainSizeWhenHidden(True)
        self.activation_label.setSizePolicy(keep)
        self.activation_label.hide()
        grid.addWidget(self.activation_label, 5, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        outer.addWidget(stats, 3)

        right = QVBoxLayout()
        right.setSpacing(2)
        self.findings_title = QLabel(self)
        right.addWidget(self.findings_title)
        self.findings = QListWidget(self)
        self.findings.setAlternatingRowColors(False)
        self.findings.setWordWrap(True)
        self.findings.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.findings.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        row_h = self.findings.fontMetrics().height() + 6
        self.findings.setFixedHeight(row_h * 4 + 6)
        self.findings.itemDoubleClicked.connect(self._activate)
        right.addWidget(self.findings)
        outer.addLayout(right, 4)

        self._shown: list[tuple[str, str, str]] = []
        self._estimator: Any = None
        self._last_run = ""
        self._findings_timer = QTimer(self)
        self._findings_timer.setSingleShot(True)
        self._findings_timer.setInterval(FINDINGS_DELAY_MS)
        self._findings_timer.timeout.connect(self.refresh_findings)
        self.optimizer_box.currentIndexChanged.connect(self._optimizer_chosen)
        self.dtype_box.currentIndexChanged.connect(lambda _i: self.refresh())
        controller.planChanged.connect(self.refresh)
        controller.modelChanged.connect(self._model_changed)
        self.refresh()

    def refresh(self, *_: object) -> None:
        """Re-read the controller's plan state."""
        i = self.optimizer_box.findData(self._c.optimizer)
        if i >= 0 and i != self.optimizer_box.currentIndex():
            self.optimizer_box.blockSignals(True)
            self.optimizer_box.setCurrentIndex(i)
            self.optimizer_box.blockSignals(False)
        state = self._c.state
        if state is None:
            self.params_label.setText("No model loaded")
            self.memory_label.clear()
            self.saving_label.clear()
            self.legend_label.clear()
            self.fit_label.clear()
            self.bar.set_counts(None)
            self.findings.clear()
            self._shown = []
            self.findings_title.clear()
            return
        c = state.counts
        opt = OPTIMIZER_LABELS.get(c.optimizer, c.optimizer)
        self.params_label.setText(
            f"<b>Trainable {fmt_count(c.trainable)}</b> of {fmt_count(c.total)} parameters "
            f"(<b>{fmt_percent(c.trainable, c.total)}</b>) · frozen {fmt_count(c.frozen)} "
            f"({fmt_percent(c.frozen, c.total)})"
        )
        self.memory_label.setText(
            f"Params + grads + {opt} state: <b>{fmt_bytes(c.training_bytes)}</b> "
            f"· full fine-tuning {fmt_bytes(c.full_ft_bytes)}"
        )
        saving = c.saving_bytes
        if saving > 0:
            self.saving_label.setText(f"saves <b>{fmt_bytes(saving)}</b> ({fmt_percent(saving, c.full_ft_bytes)})")
        elif saving < 0:
            self.saving_label.setText(f"costs {fmt_bytes(-saving)} more")
        else:
            self.saving_label.setText("no saving")
        parts = [
            _legend(f"params {fmt_bytes(c.param_bytes)}", _color("params")),
            _legend(f"grads {fmt_bytes(c.grad_bytes)}", _color("grads")),
            _legend(f"{opt} state {fmt_bytes(c.optimizer_bytes)}", _color("optimizer")),
        ]
        if c.fixed_bytes:
            parts.append(_legend(f"A of A+B {fmt_bytes(c.fixed_bytes)}", _color("fixed")))
        self.legend_label.setText("&nbsp;&nbsp;".join(parts))
        self.bar.set_counts(c)
        self._show_fit(state.memory(self.dtype))
        if len(state.tree) > DEFER_FINDINGS_ABOVE:
            self._findings_timer.start()  # the lint of a large tree: off the click's path
        else:
            self.refresh_findings()

    def refresh_findings(self) -> None:
        """Read the plan's findings again (lint, readiness) and list them."""
        self._findings_timer.stop()
        state = self._c.state
        if state is not None:
            self._fill_findings(state.messages())

    # ------------------------------------------------------------ activations
    def set_estimator(self, estimator: Any) -> None:
        """Show the next run's step memory from an
        :class:`~workbench.gui.plan.activation_estimate.ActivationEstimator`."""
        self._estimator = estimator
        estimator.changed.connect(self.show_activations)
        self.activation_label.show()
        self.show_activations()

    def show_activations(self) -> None:
        """Re-read the estimator: activations, predicted peak, fit, last run's measured peak."""
        est = self._estimator.estimate() if self._estimator is not None else None
        if est is None:
            return
        p, m = est.prediction, est.memory
        if p is None:
            text = est.note
            self.activation_label.setToolTip("")
        else:
            where = f" of {fmt_bytes(m.available)} {m.what}" if m is not None else ""
            text = (
                f"Step at batch {p.batch_size} · {p.input_text}: activations <b>{fmt_bytes(p.activations)}</b> "
                f"· peak ≈ <b>{fmt_bytes(p.peak)}</b>{where} {self._verdict_mark(est.verdict)}"
            )
            e = p.estimate
            self.activation_label.setToolTip(
                "Predicted memory of one training step (one forward pass on the meta device):\n"
                f"  weights {fmt_bytes(e.weights)} · buffers {fmt_bytes(e.buffers)} · batch {fmt_bytes(e.batch)}\n"
                f"  gradients {fmt_bytes(e.gradients)} · optimizer state {fmt_bytes(e.optimizer_state)}\n"
                f"  activations kept for backward {fmt_bytes(e.activations)} (a frozen prefix keeps none)\n"
                f"  largest temporary {fmt_bytes(e.temporary)}\n"
                f"  peak {fmt_bytes(e.peak)}"
                + (f"\n{m.device}: {fmt_bytes(m.total)} in all, {fmt_bytes(m.available)} {m.what}" if m else "")
                + ("\n" + est.warning() if est.warning() else "")
            )
        if self._last_run:
            text = f"{text}<br>{self._last_run}" if text else self._last_run
        self.activation_label.setText(text)

    @staticmethod
    def _verdict_mark(verdict: str) -> str:
        if verdict == "fits":
            return f'<span style="color:{FIT_COLORS[True].name()}">✓</span>'
        if verdict == "tight":
            return "⚠ close to the limit"
        if verdict in ("does not fit", "impossible"):
            return f'<span style="color:{FIT_COLORS[False].name()}">✗ does not fit</span>'
        return ""

    def _model_changed(self) -> None:
        """Another model: the last run's line was the old model's (the Runs tab keeps the run)."""
        self._last_run = ""
        self.refresh()
        self.show_activations()

    def show_run_memory(self, summary: dict[str, Any]) -> None:
        """Show a finished run's predicted against measured peak memory.

        Args:
            summary: the run's summary: ``predicted_peak_bytes`` (from the Start check),
                ``peak_memory_bytes`` and ``memory_source`` (the engine's one peak number),
                and on the CPU ``peak_rss_bytes`` (the absolute process RSS, named as such).
        """
        predicted = summary.get("predicted_peak_bytes")
        measured = summary.get("peak_memory_bytes")  # the run's one peak number (core.training.metrics)
        source = summary.get("memory_source") or ""
        self._last_run = ""
        if predicted and measured is not None:  # a measured 0 (no growth) is a reading too
            self._last_run = (
                f"Last run: predicted peak {fmt_memory(int(predicted))} · measured {fmt_memory(int(measured))} "
                f"({source}; {int(measured) / int(predicted):.2f}×)"
            )
            if summary.get("peak_rss_bytes"):
                self._last_run += f" · peak RSS {fmt_memory(int(summary['peak_rss_bytes']))} (process, absolute)"
        self.show_activations()

    @property
    def dtype(self) -> str:
        """The weights dtype of the GPU estimate (``fp32``, ``bf16``, ``fp16``)."""
        return self.dtype_box.currentData() or "fp32"

    def set_dtype(self, dtype: str) -> None:
        """Choose the weights dtype of the GPU estimate.

        Args:
            dtype: ``"fp32"``, ``"bf16"`` or ``"fp16"``.

        Raises:
            ValueError: another dtype.
        """
        i = self.dtype_box.findData(dtype)
        if i < 0:
            raise ValueError(f"unknown dtype {dtype!r} for the GPU estimate; use one of {', '.join(DTYPE_BYTES)}")
        self.dtype_box.setCurrentIndex(i)

    def _show_fit(self, est: ParamMemory) -> None:
        opt = OPTIMIZER_LABELS.get(est.optimizer, est.optimizer)
        self.fit_label.setText(fit_text(est))
        state = f"{opt} state ({est.state_dtype})"
        self.fit_label.setToolTip(
            f"Training memory with {est.dtype} weights (activations not counted):\n"
            f"  parameters {fmt_bytes(est.param_bytes)}\n"
            f"  gradients {fmt_bytes(est.grad_bytes)}\n"
            f"  {state} {fmt_bytes(est.optimizer_bytes)}\n"
            f"  total {fmt_bytes(est.total_bytes)} (full fine-tuning {fmt_bytes(est.full_ft_bytes)})\n"
            + "\n".join(
                f"  {size // 10**9} GB GPU: {'fits' if est.fits(size) else 'does not fit'}" for size in GPU_SIZES
            )
        )

    def _fill_findings(self, messages: list[tuple[str, str, str]]) -> None:
        if messages == self._shown and self.findings.count():
            return  # unchanged: no relayout
        self._shown = list(messages)
        self.findings.clear()
        style = self.style()
        icons = {
            "error": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical),
            "warning": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning),
            "info": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxInformation),
        }
        state = self._c.state
        why = {finding_line(f): f for f in state.findings} if state is not None else {}
        for severity, text, path in messages:
            item = QListWidgetItem(icons.get(severity, icons["info"]), text)
            f = why.get(text)
            tip = text if f is None else f"{f.message}\nWhy: {f.why}\nFix: {f.fix}"
            item.setToolTip(tip + ("\n(double-click to select the module)" if path else ""))
            item.setData(Qt.ItemDataRole.UserRole, path)
            self.findings.addItem(item)
        n = len(messages)
        if n:
            mark = "⚠ " if any(sev in ("error", "warning") for sev, _t, _p in messages) else ""
            self.findings_title.setText(f"<b>{mark}{n} finding{'s' if n != 1 else ''}</b>")
        else:
            self.findings_title.setText("<b>No pitfalls found</b>")
            item = QListWidgetItem("The plan has none of the known freezing pitfalls.")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.findings.addItem(item)

    def _activate(self, item: QListWidgetItem) -> None:
        path = item.data(Qt.ItemDataRole.UserRole)
        if path:
            self.findingActivated.emit(path)

    def _optimizer_chosen(self, index: int) -> None:
        key = self.optimizer_box.itemData(index)
        if key:
            self._c.set_optimizer(key)


def _color(key: str) -> QColor:
    return SEGMENT_COLORS[key]

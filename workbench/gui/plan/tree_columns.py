"""The columns of the module tree, as one table.

Each :class:`TreeColumn` says everything the model and the view need about one column: its
header and header tooltip, alignment, what a cell displays, its check state, tooltip, colour
and font, the raw number behind it, which editor the view gives it, and how an edit of a cell
becomes a plan edit. :data:`COLUMNS` lists them in display order;
:class:`~workbench.gui.plan.tree_model.ModuleTreeModel` and
:class:`~workbench.gui.plan.tree_view.ModuleTreeView` only iterate it.

Adding a per-module toggle (a plan key shown as a checkbox) is one :func:`toggle_column` row
in :data:`COLUMNS`: a switch key's state over the subtree comes from
:meth:`NodeState.tri <workbench.gui.plan.state.NodeState.tri>` (or a named
``"on"/"off"/"mixed"`` field of :class:`~workbench.gui.plan.state.NodeState`). A per-module number (a plan key whose row
says :attr:`~workbench.core.plan.keys.PlanKey.numeric`, like ``lr_scale``) is one
:func:`number_column` row: header, parsing, the error message and the undo text come from the
key's row.

A live column (:func:`live_column`) shows a number measured while training (gradient norm,
update/weight ratio) from the run's latest
:class:`~workbench.core.training.module_stats.ModuleStats`, heat-coloured over the rows in
view; frozen rows stay blank.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette

from workbench.core.formatting import fmt_count, fmt_lr
from workbench.core.plan.keys import rule_key
from workbench.core.plan.spec_base import ExtensionSpec
from workbench.core.plan.tree import ModuleNode
from workbench.gui.plan.edits import A_PLUS_B
from workbench.gui.plan.state import NodeState, deciding_rule

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.gui.controller import Controller

__all__ = [
    "COLUMNS",
    "Column",
    "Editor",
    "HEADERS",
    "TreeColumn",
    "check_value",
    "column_index",
    "heat_color",
    "live_column",
    "number_column",
    "parse_lr",
    "rule_source",
    "toggle_column",
]

_CHECK = {"on": Qt.CheckState.Checked, "off": Qt.CheckState.Unchecked, "mixed": Qt.CheckState.PartiallyChecked}
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_CENTER = int(Qt.AlignmentFlag.AlignCenter)
_LEFT = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
_FROZEN_COLOR = QColor(61, 111, 168)


class Editor(Enum):
    """How the view edits a column's cells."""

    NONE = "none"  # read-only
    CHECK = "check"  # a centred checkbox (toggle columns)
    NUMBER = "number"  # a line editor for numbers >= 0 or empty (a numeric plan key)
    LR = "number"  # noqa: PIE796 (an alias of NUMBER on purpose: LR × was its first column)


def _empty(node: ModuleNode, st: NodeState) -> str:
    return ""


@dataclass(frozen=True)
class TreeColumn:
    """One column of the module tree.

    Attributes:
        key: the column's name; for a toggle, the plan key it edits.
        header: header text.
        tooltip: header tooltip.
        alignment: alignment of the cells' text (toggle headers are centred).
        display: the cell's text (``DisplayRole`` and ``EditRole``).
        check: the cell's check state, or None for no checkbox.
        tip: the cell's tooltip, given the controller, or None.
        foreground: the cell's text colour, or None for the palette's.
        bold: whether the cell's text is bold, given the controller.
        value: the raw number behind the cell (``VALUE_ROLE``), or None.
        editor: which editor the view gives the column.
        set_data: turns an edit into a plan edit: ``(controller, path, value) -> understood``;
            a toggle's value is a bool (checked), an editor's the text entered.
        toggle: a checkbox column: ``setData`` takes ``CheckStateRole``; a cell is user-checkable
            when it has a check state.
        width_text: text whose width (plus ``width_pad``) is the column's initial width; None:
            the column stretches.
        width_pad: extra pixels beyond the view's usual padding.
        live: a live column's number for a module, ``live(stats, path) -> float | None``, given
            the latest ``ModuleStats``; None for the plan's columns.
        live_format: the text of a live number.
    """

    key: str
    header: str
    tooltip: str
    alignment: int = _LEFT
    display: Callable[[ModuleNode, NodeState], str | None] = _empty
    check: Callable[[NodeState], Qt.CheckState | None] | None = None
    tip: Callable[[Controller, ModuleNode, NodeState], str | None] | None = None
    foreground: Callable[[ModuleNode, NodeState], QColor | None] | None = None
    bold: Callable[[Controller, ModuleNode], bool] | None = None
    value: Callable[[ModuleNode, NodeState], Any] | None = None
    editor: Editor = Editor.NONE
    set_data: Callable[[Controller, str, Any], bool] | None = None
    toggle: bool = False
    width_text: str | None = None
    width_pad: int = 0
    live: Callable[[Any, str], float | None] | None = None
    live_format: Callable[[float], str] = str

    @property
    def header_alignment(self) -> int:
        """Alignment of the header text: toggles centred over their checkboxes."""
        return _CENTER if self.toggle else self.alignment

    @property
    def editable(self) -> bool:
        """Whether cells are edited through an editor (``EditRole``)."""
        return self.set_data is not None and not self.toggle


def check_value(value: Any) -> bool:
    """Whether a value given to ``setData(..., CheckStateRole)`` means "checked".

    Args:
        value: a ``Qt.CheckState``, an int, or a bool.

    Returns:
        True for Checked and PartiallyChecked.
    """
    if isinstance(value, Qt.CheckState):
        return value != Qt.CheckState.Unchecked
    if isinstance(value, bool):
        return value
    return int(value) != 0


def parse_lr(value: Any) -> float | None | bool:
    """Read an LR × cell edit (:meth:`~workbench.core.plan.keys.PlanKey.parse_text` of ``lr_scale``).

    Args:
        value: text or number.

    Returns:
        The multiplier, None for an empty text (inherit), or False when it is not a number >= 0.
    """
    try:
        scale: float | None = rule_key("lr_scale").parse_text(value)
    except ValueError:
        return False
    return scale


def rule_source(c: Controller, node: ModuleNode, key: str) -> str:
    """Where a module's setting of a plan key comes from, for tooltips.

    Args:
        c: the controller (its plan and tree).
        node: the module.
        key: the plan key.

    Returns:
        ``"default"``, ``"set here (rule i)"`` or ``"from rule i: SELECTOR"``.
    """
    tree = c.tree
    assert tree is not None
    i = deciding_rule(c.plan, tree, node.path, key)
    if i is None:
        return "default"
    sel = c.plan.rules[i].select
    if sel in ("", "*"):
        sel = "(root)"
    return f"set here (rule {i})" if sel == (node.path or "(root)") else f"from rule {i}: {sel}"


def _muted(*_: Any) -> QColor:
    return QGuiApplication.palette().color(QPalette.ColorRole.PlaceholderText)


def _describe_extension(spec: ExtensionSpec, *args: Any) -> str:
    """``spec.describe(...)``, or the spec as JSON."""
    try:
        return str(spec.describe(*args))
    except Exception:
        return json.dumps(spec.to_json(), default=str)


def toggle_column(
    key: str,
    header: str,
    tooltip: str,
    field: str | None,
    tip: Callable[[Controller, ModuleNode, NodeState], str | None],
    to_plan: Callable[[bool], Any] = bool,
    display: Callable[[ModuleNode, NodeState], str | None] = _empty,
    width_pad: int = 0,
) -> TreeColumn:
    """A checkbox column over a plan key.

    Args:
        key: the plan key a click sets (on the clicked module).
        header: header text (also the width sample).
        tooltip: header tooltip.
        field: the :class:`~workbench.gui.plan.state.NodeState` field shown (``"on"``, ``"off"``,
            ``"mixed"``, or None for no checkbox); None: the key's state over the subtree,
            :meth:`NodeState.tri(key) <workbench.gui.plan.state.NodeState.tri>` (any switch key).
        tip: the cell's tooltip.
        to_plan: the plan value of a click (checked or not).
        display: a short note beside the box (``auto``).
        width_pad: extra pixels of width.

    Returns:
        The column.
    """

    def check(st: NodeState) -> Qt.CheckState | None:
        tri = st.tri(key) if field is None else getattr(st, field)
        return _CHECK[tri] if tri is not None else None

    def set_data(c: Controller, path: str, on: Any) -> bool:
        c.set_value([path], key, to_plan(bool(on)))
        return True

    return TreeColumn(
        key, header, tooltip, display=display, check=check, tip=tip, editor=Editor.CHECK,
        set_data=set_data, toggle=True, width_text=header, width_pad=width_pad,
    )


def number_column(
    key: str, tooltip: str, fmt: Callable[[Any], str] = fmt_lr, ignored: str = "the setting has no effect",
    width_pad: int = 8,
) -> TreeColumn:
    """An editable column of a numeric plan key's value on each module.

    Everything about the key comes from its row of
    :data:`~workbench.core.plan.keys.RULE_KEYS`: the header (:attr:`PlanKey.label`), reading
    and checking a typed value (:meth:`PlanKey.parse_text`; empty text inherits), the error
    message, the default (muted) and the undo text.

    Args:
        key: the plan key (its row says ``numeric``).
        tooltip: header tooltip.
        fmt: the text of a value (an absent value, None, shows empty).
        ignored: what the cell's tooltip says when every parameter below is frozen and the
            value differs from the default.
        width_pad: extra pixels of width.

    Returns:
        The column.
    """
    row = rule_key(key)

    def show(v: Any) -> str:
        return "" if v is None else fmt(v)

    def tip(c: Controller, node: ModuleNode, st: NodeState) -> str:
        text = f"{row.label} {show(st.value(key)) or 'not set'} — {rule_source(c, node, key)}"
        if st.ignored(key):
            text += f". Every parameter below is frozen: {ignored}"
        return text

    def set_data(c: Controller, path: str, value: Any) -> bool:
        try:
            parsed = row.parse_text(value)
        except ValueError as e:
            c.errorOccurred.emit(f"Invalid {row.label}", str(e), "")
            return False
        c.set_value([path], key, parsed)
        return True

    return TreeColumn(
        key, row.label, tooltip, _CENTER,
        display=lambda node, st: show(st.value(key)), tip=tip,
        foreground=lambda node, st: _muted() if st.value(key) == row.default or st.frozen == "on" else None,
        bold=lambda c, node: c.state is not None and node.path in c.state.explicit.get(key, ()),
        value=lambda node, st: st.value(key), editor=Editor.NUMBER, set_data=set_data, width_text=row.label,
        width_pad=width_pad,
    )


def live_column(
    key: str, header: str, tooltip: str, live: Callable[[Any, str], float | None], fmt: Callable[[float], str],
    width_text: str,
) -> TreeColumn:
    """A read-only column of a number measured while training.

    Args:
        key: the column's name.
        header: header text.
        tooltip: header tooltip (also the start of each cell's tooltip).
        live: ``live(stats, path) -> number or None`` (see :class:`TreeColumn`).
        fmt: the text of a number.
        width_text: sample text for the column's width.

    Returns:
        The column.
    """
    return TreeColumn(key, header, tooltip, _RIGHT, live=live, live_format=fmt, width_text=width_text, width_pad=4)


def heat_color(t: float) -> QColor:
    """The background of a live cell: transparent for the lowest value in view, warm for the highest.

    A translucent orange reads on light and dark palettes alike.

    Args:
        t: the value's place between the lowest (0) and highest (1) in view (log scale).

    Returns:
        The colour.
    """
    t = min(max(t, 0.0), 1.0)
    return QColor(240, 110, 20, int(20 + 150 * t))


def _sci(v: float) -> str:
    return f"{v:.2g}" if 1e-2 <= abs(v) < 1e3 or v == 0 else f"{v:.1e}".replace("e-0", "e-").replace("e+0", "e")


# ---------------------------------------------------------------------- cell tooltips
def _module_tip(c: Controller, node: ModuleNode, st: NodeState) -> str:
    return f"{node.path or '(root)'} — {node.type_name}"


def _type_tip(c: Controller, node: ModuleNode, st: NodeState) -> str:
    return " → ".join(node.type_names) or node.type_name


def _count_tip(c: Controller, node: ModuleNode, st: NodeState) -> str:
    own = f"; own {node.own_params:,}" if node.children and node.own_params else ""
    return f"{node.total_params:,} parameters, {st.trainable:,} trainable{own}"


def _frozen_tip(c: Controller, node: ModuleNode, st: NodeState) -> str:
    if st.partial:
        loaded = c.loaded
        param = st.partial.param
        name = f"{node.path}.{param}" if node.path else param
        shape = loaded.param_shapes.get(name) if loaded is not None else None
        text = _describe_extension(st.partial, shape, node.type_name)
        return f"Partially frozen: {text} — {rule_source(c, node, 'partial')}"
    text = {"on": "Frozen", "off": "Trains", "mixed": "Some modules below are frozen"}[st.frozen]
    if st.partial_below:
        text += " (sub-tensor freezing below)"
    kept = c.state is not None and node.path in c.state.effective and c.state.effective[node.path].kept
    source = "kept as the model has it (no rule selects it; the plan keeps unselected modules)" if kept else rule_source(c, node, "frozen")
    return f"{text} — {source}. Space toggles the selected rows."


def _ab_tip(c: Controller, node: ModuleNode, st: NodeState) -> str:
    if st.reparam is None:
        return "No parameters to reparameterize"
    text = {"on": "A+B on", "off": "A+B off", "mixed": "A+B on some modules below"}[st.reparam]
    spec = c.state.effective[node.path].reparam if c.state is not None else None
    if spec and node.own_params:
        text = _describe_extension(spec)
    return f"{text} — {rule_source(c, node, 'reparam')}"


def _bn_tip(c: Controller, node: ModuleNode, st: NodeState) -> str | None:
    if st.bn is None:
        return None
    what = {"on": "eval mode", "off": "train mode", "mixed": "some in eval mode"}[st.bn]
    how = "follows Frozen (frozen BatchNorm runs in eval mode)" if st.bn_auto else rule_source(c, node, "bn_eval")
    return f"BatchNorm {what} — {how}"


#: The module tree's columns, in display order.
COLUMNS: tuple[TreeColumn, ...] = (
    TreeColumn(
        "module", "Module", "Module path in the model (as in plans and scripts)",
        display=lambda node, st: node.name,
        tip=_module_tip,
        foreground=lambda node, st: _FROZEN_COLOR if st.frozen == "on" and node.total_params else None,
        bold=lambda c, node: node.parent is None,
    ),
    TreeColumn(
        "type", "Type", "Module class",
        display=lambda node, st: node.type_name, tip=_type_tip, foreground=_muted, width_text="BatchNorm2d",
    ),
    TreeColumn(
        "params", "Params", "Parameters of the module and everything below it", _RIGHT,
        display=lambda node, st: fmt_count(node.total_params), tip=_count_tip,
        foreground=lambda node, st: _muted() if node.total_params == 0 else None,
        value=lambda node, st: node.total_params, width_text="888.8M",
    ),
    TreeColumn(
        "trainable", "Trainable", "Parameters that train under the plan", _RIGHT,
        display=lambda node, st: fmt_count(st.trainable), tip=_count_tip,
        foreground=lambda node, st: _muted() if st.trainable == 0 else None,
        value=lambda node, st: st.trainable, width_text="Trainable",
    ),
    toggle_column(
        "frozen", "Frozen", "Frozen: the parameters do not train (partially checked: some below do)",
        "frozen", _frozen_tip,
    ),
    toggle_column(
        "reparam", "A+B", "A+B: train a delta B on top of the fixed pretrained weight A (W = A + B)",
        "reparam", _ab_tip, to_plan=lambda on: dict(A_PLUS_B) if on else False,
        display=lambda node, st: st.reparam_text if st.reparam in ("on", "mixed") else "", width_pad=30,
    ),
    toggle_column(
        "bn_eval", "BN eval",
        "BatchNorm in eval mode: running statistics are used and not updated, even in model.train()",
        "bn", _bn_tip, display=lambda node, st: "auto" if st.bn is not None and st.bn_auto else "", width_pad=6,
    ),
    number_column(
        "lr_scale", "Learning-rate multiplier for the module's parameters (double-click to edit; empty = inherit)",
        ignored="the multiplier has no effect",
    ),
    live_column(
        "grad_norm", "Grad ‖g‖",
        "Gradient norm of the module's trainable parameters (and everything below it), measured every "
        "few steps while training; warmer = larger among the rows in view",
        lambda stats, path: stats.grad_norm(path), _sci, width_text="8.8e-88",
    ),
    live_column(
        "update_ratio", "Δw/w",
        "Update/weight ratio ‖Δw‖/‖w‖ of one optimizer step (the module and everything below it), measured "
        "every few steps while training: about 1e-3 is typical; far lower barely learns, far higher overwrites",
        lambda stats, path: stats.update_ratio(path), _sci, width_text="8.8e-88",
    ),
)

#: Header texts, in column order.
HEADERS = [col.header for col in COLUMNS]


def column_index(key: str) -> int:
    """The position of a column in :data:`COLUMNS`.

    Args:
        key: the column's key (``"frozen"``, ``"lr_scale"``, ...).

    Returns:
        Its index.

    Raises:
        KeyError: no column has that key.
    """
    for i, col in enumerate(COLUMNS):
        if col.key == key:
            return i
    raise KeyError(f"no tree column {key!r}; the columns are {', '.join(c.key for c in COLUMNS)}")


class Column(IntEnum):
    """Names for the positions of the columns in :data:`COLUMNS` (for callers and tests)."""

    MODULE = column_index("module")
    TYPE = column_index("type")
    PARAMS = column_index("params")
    TRAINABLE = column_index("trainable")
    FROZEN = column_index("frozen")
    AB = column_index("reparam")
    BN = column_index("bn_eval")
    LR = column_index("lr_scale")
    GRAD = column_index("grad_norm")
    UPDATE = column_index("update_ratio")

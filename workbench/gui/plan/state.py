"""What the window shows for a plan on a model, computed once per plan edit (Qt-free).

:class:`PlanState` is derived from a :class:`~workbench.core.models.tree.ModelTree` and a
:class:`~workbench.core.plan.rules.FreezePlan` only. Over the tree's flat pre-order arrays
the core's plan engine for large trees (:mod:`workbench.core.plan.fast`) resolves the plan with
numpy (groups of rows with the same settings) and counts each row and subtree in named columns;
this module turns those into every tree row's checkbox states and trainable count (made when a
row is read),
the cost panel its :class:`~workbench.core.freezing.apply.Counts`, and the lint findings. The
model itself is never touched, so a click on the root of a 50,000-module tree costs tens of
milliseconds.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from workbench.core.checks.findings import Finding
from workbench.core.checks.lint import lint_plan
from workbench.core.freezing.counts import Counts, optimizer_state_factor
from workbench.core.models.memory import ParamMemory, estimate_memory
from workbench.core.plan.fast import counts as fast_counts
from workbench.core.plan.fast.counts import SUMMED, Own, PlanRows
from workbench.core.plan.fast.layout import Layout, LazyMap, layout
from workbench.core.plan.fast.resolve import supported
from workbench.core.plan.keys import INHERITED_KEYS, PlanKey, rule_key
from workbench.core.plan.partial_spec import PartialSpec
from workbench.core.plan.readiness import PlanReadiness, check_plan
from workbench.core.plan.rules import Effective, FreezePlan, PlanProblem, Rule, select_paths
from workbench.core.plan.tree import ModelTree, ModuleNode

__all__ = [
    "NodeState",
    "PlanState",
    "Tri",
    "deciding_rule",
    "explicit_paths",
    "finding_line",
    "rule_selects",
]

#: A checkbox state over a subtree: every parameter ``"on"``, none ``"off"``, or ``"mixed"``.
Tri = Literal["on", "off", "mixed"]


class NodeState(NamedTuple):
    """What one tree row shows (a tuple: cheap to build and compare for 5,000+ rows).

    A switch key (:attr:`~workbench.core.plan.keys.PlanKey.switch`) shows as a checkbox state
    over the subtree (:meth:`tri`): ``frozen`` and ``reparam`` counted over parameter elements
    (sub-tensor freezing, A+B's added elements), ``bn_eval`` over BatchNorm modules, and any
    other switch over the subtree's modules (its BatchNorm modules for a key that acts on those
    only; see :func:`_switch_tri`). Every other plan key shows the module's own value in force, read from
    :attr:`settings` by key name (:meth:`value`). So a new key needs no field here.

    Attributes:
        frozen: Frozen checkbox over the subtree's parameters (a module without parameters
            below it shows its own effective flag); ``"mixed"`` also for partial freezing.
        trainable: trainable parameter elements in the subtree.
        reparam: A+B over the subtree's parameters; None when there are no parameters.
        bn: BN eval over the BatchNorm modules in the subtree; None when there are none.
        bn_auto: every BatchNorm module below follows ``frozen`` (no explicit ``bn_eval``).
        settings: the module's own settings in force (one field per plan key).
        params: parameter elements in the subtree (A+B's added elements included).
        partial_below: some module in the subtree has sub-tensor freezing.
        switches: ``(key, state)`` of the other switch keys, counted over modules.
    """

    frozen: Tri
    trainable: int
    reparam: Tri | None
    bn: Tri | None
    bn_auto: bool
    settings: Effective
    params: int = 0
    partial_below: bool = False
    switches: tuple[tuple[str, Tri | None], ...] = ()

    def tri(self, key: str) -> Tri | None:
        """The checkbox state of a switch key over the subtree.

        Args:
            key: a switch key.

        Returns:
            ``"on"``, ``"off"``, ``"mixed"``, or None when the subtree has nothing it acts on.

        Raises:
            KeyError: not a switch key.
        """
        if key == "frozen":
            return self.frozen
        if key == "reparam":
            return self.reparam
        if key == "bn_eval":
            return self.bn
        return dict(self.switches)[key]

    def value(self, key: str) -> Any:
        """The module's own value in force of a plan key.

        Args:
            key: a setting key (a row of :data:`~workbench.core.plan.keys.SETTING_KEYS`).

        Returns:
            ``Effective.<key>``.
        """
        return getattr(self.settings, key)

    def ignored(self, key: str) -> bool:
        """Whether a per-parameter setting away from its default has no effect: every parameter
        below is frozen.

        Args:
            key: a setting key.

        Returns:
            True when the module's value differs from the key's default and nothing below trains.
        """
        return self.value(key) != rule_key(key).default and self.params > 0 and self.trainable == 0

    @property
    def lr_scale(self) -> float:
        """The module's own effective ``lr_scale``."""
        return float(self.settings.lr_scale)

    @property
    def partial(self) -> PartialSpec | None:
        """The module's own sub-tensor freezing spec, if any."""
        return self.settings.partial

    @property
    def lr_ignored(self) -> bool:
        """``lr_scale`` differs from 1 but every parameter below is frozen."""
        return self.ignored("lr_scale")

    @property
    def reparam_text(self) -> str:
        """The A+B in force on the module: ``"full"``, ``"r=8"``, or ``""``."""
        spec = self.settings.reparam
        return spec.short() if spec else ""


def _tri(part: int, whole: int) -> Tri:
    if part <= 0:
        return "off"
    return "on" if part >= whole else "mixed"


def rule_selects(rule: Rule, node: ModuleNode, tree: ModelTree) -> bool:
    """Whether ``rule``'s selector reaches ``node`` (directly or through an ancestor).

    Args:
        rule: a plan rule.
        node: a tree node.
        tree: the tree ``node`` belongs to.

    Returns:
        True when the rule's inherited settings apply to the node.
    """
    direct = set(select_paths(rule.select, tree, subtree=False))
    n: ModuleNode | None = node
    while n is not None:
        if n.path in direct:
            return True
        n = n.parent
    return False


def deciding_rule(plan: FreezePlan, tree: ModelTree, path: str, key: str) -> int | None:
    """Index of the rule whose ``key`` is in force on a module (the last one that reaches it).

    Args:
        plan: the plan.
        tree: the model's tree.
        path: the module's path.
        key: a setting key (``"frozen"``, ``"bn_eval"``, ``"lr_scale"``, ``"reparam"``, ``"partial"``, ...).

    Returns:
        The rule index, or None when no rule sets ``key`` for the node (default applies).
    """
    inherited = rule_key(key).inherited
    for i in range(len(plan.rules) - 1, -1, -1):
        r = plan.rules[i]
        if not r.sets(key):
            continue
        if not inherited:  # applies to the modules a selector matches directly
            if path in select_paths(r.select, tree, subtree=False):
                return i
        elif rule_selects(r, tree.nodes[path], tree):
            return i
    return None


def explicit_paths(plan: FreezePlan, key: str) -> set[str]:
    """Module paths that a plain-path rule sets ``key`` on (``""`` for the root).

    Args:
        plan: the plan.
        key: a setting key.

    Returns:
        The set of paths (glob and ``type:`` rules are not included).
    """
    out: set[str] = set()
    for r in plan.rules:
        if r.sets(key) and not r.select.startswith("type:") and not any(c in r.select for c in "?["):
            if r.select in ("", "*"):
                out.add("")
            elif "*" not in r.select:
                out.add(r.select)
    return out


def finding_line(finding: Finding) -> str:
    """A finding as one line without its severity word (the window shows an icon).

    Args:
        finding: a lint finding.

    Returns:
        ``"bn1: frozen BatchNorm runs in train mode — remove bn_eval: false"``.
    """
    tail = f" — {finding.fix}" if finding.fix else ""
    return f"{finding.path or '(model)'}: {finding.message}{tail}"


def _node_state(lay: Layout, i: int, e: Effective, sums: np.ndarray, tallied: Sequence[PlanKey]) -> NodeState:
    """One row's state from its effective settings and subtree sums (:class:`Own` columns)."""
    row = sums[i]
    fz, rp, ad = int(row[Own.FROZEN]), int(row[Own.REPARAM]), int(row[Own.ADDED])
    be, ba, pa = int(row[Own.BN_EVAL]), int(row[Own.BN_FOLLOWS]), int(row[Own.PARTIAL])
    params, bn = int(lay.total[i]) + ad, int(lay.bn_total[i])
    if params == 0:
        ftri: Tri = "on" if e.frozen else "off"
    else:
        ftri = "off" if fz <= 0 else ("on" if fz >= params else "mixed")
    if pa:
        ftri = "mixed"
    trainable = params - fz
    r = rp + ad
    return NodeState(
        ftri,
        trainable,
        ("off" if r <= 0 else ("on" if r >= params else "mixed")) if params else None,
        _tri(be, bn) if bn else None,
        bool(bn) and ba == bn,
        e,
        params,
        bool(pa),
        tuple((key.name, _switch_tri(lay, i, e, key, int(row[SUMMED + j]))) for j, key in enumerate(tallied)),
    )


def _switch_tri(lay: Layout, i: int, e: Effective, key: PlanKey, count: int) -> Tri | None:
    """A tallied switch key over row ``i``'s subtree, from how many of its modules have it on.

    An inherited key: on / off / mixed over the subtree's modules (its BatchNorm modules for a
    key that acts on those only; None when there are none). A key set on matched modules only
    (``checkpoint``): on when the module has it, mixed when only modules below do.
    """
    whole = int(lay.bn_total[i]) if key.batchnorm_only else int(lay.end[i]) - i
    if not whole:
        return None
    if key.inherited:
        return _tri(count, whole)
    if key.is_on(getattr(e, key.name)):
        return "on"
    return "mixed" if count else "off"


def _counts(tree: ModelTree, rows: PlanRows, optimizer: str) -> Counts:
    """Parameters and training memory from the rows' totals."""
    t = rows.totals(tree)
    return Counts.from_totals(t.total, t.trainable, t.param_bytes, t.trainable_bytes, t.fixed_bytes, optimizer)


class PlanState:
    """Everything the tree and the cost panel show for ``plan`` on ``tree``.

    Build with :meth:`compute`. Immutable by convention: a plan edit makes a new state
    (from the previous one, recounting only the rows the edit can reach).

    Attributes:
        tree: the model's tree.
        plan: the plan (not copied: callers never mutate a plan in place).
        effective: ``plan.resolve(tree)``.
        nodes: ``{path: NodeState}``.
        counts: parameters and training memory for ``optimizer``.
        changed: pre-order row indices whose state may differ from the previous state's
            (None: any row may, e.g. a first state or a full recount).
        findings: lint findings (pitfalls), most severe first (computed when first read).
        problems: rules that do not fit the model (selectors matching nothing, extension
            specs the model refuses), as :class:`PlanProblem` (for the open-plan dialog
            and "remove rules that match nothing"); the same as ``readiness.problems``.
        readiness: whether the plan fits the model and leaves something trainable (the
            one predicate the trainer uses too; computed when first read).
        notes: other one-line notes (a plan made for a different model).
        explicit: ``{key: set of paths}`` set by plain-path rules, for every inherited key (bold in the tree).
        bn_modules / bn_eval_modules: BatchNorm modules, and those in eval mode.
        reparam_modules: modules with parameters that have A+B.
        fixed_params: elements of the fixed tensors A that A+B adds (for :meth:`memory`).
    """

    def __init__(
        self, tree: ModelTree, plan: FreezePlan, counts: Counts, optimizer: str, rows: PlanRows,
        changed: list[int] | None = None, base: PlanState | None = None,
    ) -> None:
        self.tree = tree
        self.plan = plan
        lay = layout(tree)
        self._lay = lay
        tallied = fast_counts.tallied()
        self._effective: dict[str, Effective] | None = None
        self.nodes: LazyMap[NodeState] = LazyMap(
            lay, lambda i: _node_state(lay, i, rows.effectives[rows.group[i]], rows.sums, tallied)
        )
        self.counts = counts
        self.optimizer = optimizer
        self.changed = changed
        self._base = weakref.ref(base) if base is not None else None
        self._rows = rows
        totals = rows.totals(tree)
        self.bn_modules = totals.bn_modules
        self.bn_eval_modules = totals.bn_eval_modules
        self.reparam_modules = totals.reparam_modules
        self.fixed_params = totals.fixed_elements
        self.notes: list[str] = []
        fp = plan.model.get("fingerprint")
        if fp and fp != tree.fingerprint:
            self.notes.append(
                "the plan was made for a model with other parameter names or shapes; "
                "rules are applied by module path"
            )
        self.explicit = {k: explicit_paths(plan, k) for k in INHERITED_KEYS}
        self._readiness: PlanReadiness | None = None
        self._findings: list[Finding] | None = None

    @property
    def effective(self) -> dict[str, Effective]:
        """``plan.resolve(tree)``: ``{path: Effective}`` (built on first read from the rows' groups)."""
        if self._effective is None:
            self._effective = self._rows.effective(self.tree)
        return self._effective

    def settings_in_use(self) -> list[Effective]:
        """The distinct effective settings some module has (one per group of rows, not one per
        module: asking every module of a 50,000-module tree takes a second).

        Returns:
            The settings, in no particular order.
        """
        effs = self._rows.effectives
        return [effs[g] for g in np.unique(self._rows.group).tolist()]

    @property
    def base(self) -> PlanState | None:
        """The state :attr:`changed` is counted from (None: a full count, or it is gone)."""
        return self._base() if self._base is not None else None

    @property
    def readiness(self) -> PlanReadiness:
        """Whether the plan fits the model (:func:`~workbench.core.plan.readiness.check_plan`).

        For a plan of module rules alone without stages, "leaves something trainable" (some
        module with parameters is not frozen) is read from the rows' arrays; a property test
        checks it equals :func:`check_plan`.
        """
        if self._readiness is None:
            if not self.plan.stages and supported(self.plan):
                r = self._rows
                frozen = np.fromiter((e.frozen for e in r.effectives), dtype=bool, count=len(r.effectives))
                trainable = bool(np.any((self._lay.own > 0) & ~frozen[r.group]))
                self._readiness = PlanReadiness(tuple(self.plan.fit_problems(self.tree)), trainable)
            else:
                self._readiness = check_plan(self.plan, self.tree, effective=self.effective)
        return self._readiness

    @property
    def problems(self) -> list[PlanProblem]:
        """The rules that do not fit the model (``readiness.problems``)."""
        return list(self.readiness.problems)

    @property
    def findings(self) -> list[Finding]:
        """Lint findings, most severe first."""
        if self._findings is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found = lint_plan(self.plan, self.tree, self.optimizer, effective=self.effective)
            order = {"error": 0, "warning": 1, "info": 2}
            self._findings = sorted(found, key=lambda f: order.get(f.severity, 3))
        return self._findings

    @classmethod
    def compute(
        cls,
        tree: ModelTree,
        plan: FreezePlan,
        own_bytes: Mapping[str, int] | None = None,
        optimizer: str = "adamw",
        param_shapes: Mapping[str, tuple[int, ...]] | None = None,
        previous: PlanState | None = None,
    ) -> PlanState:
        """Resolve ``plan`` on ``tree`` and aggregate every row bottom-up.

        With ``previous`` (the state of the plan before an edit, on the same tree), only
        the rows the edit can reach (:func:`~workbench.core.plan.fast.counts.recount`)
        and their ancestors are recounted; the result is the same as without it.

        Args:
            tree: the model's tree.
            plan: the plan.
            own_bytes: bytes of each module's own parameters (default: 4 per element).
            optimizer: optimizer name for the state bytes (see
                :func:`workbench.core.freezing.apply.optimizer_state_factor`).
            param_shapes: ``{parameter name: shape}`` (canonical names), used to count the
                frozen part of sub-tensor freezing; without it such modules count as trainable.
            previous: the state before the edit.

        Returns:
            The state.

        Raises:
            ValueError: unknown optimizer name.
        """
        optimizer_state_factor(optimizer)  # unknown names fail before any work
        shapes = param_shapes or {}
        prev_rows = previous._rows if previous is not None else None
        if (previous is not None and prev_rows is not None and previous.tree is tree
                and prev_rows.own_bytes is own_bytes and (shapes or None) is (param_shapes or None)):
            hit = fast_counts.recount(prev_rows, previous.plan, plan, tree, shapes)
            if hit is not None:
                rows, touched = hit
                return cls(tree, plan, _counts(tree, rows, optimizer), optimizer, rows, touched.tolist(), previous)
        rows = fast_counts.count_plan(plan, tree, own_bytes, shapes)
        return cls(tree, plan, _counts(tree, rows, optimizer), optimizer, rows, None)

    def rows_differing(self, other: PlanState) -> np.ndarray:
        """Pre-order rows whose :class:`NodeState` or effective settings may differ from ``other``'s.

        Args:
            other: a state on the same tree.

        Returns:
            Sorted row indices (int array).
        """
        a, b = self._rows, other._rows
        differ = (a.sums != b.sums).any(axis=1) | (a.codes[a.group] != b.codes[b.group])
        return np.nonzero(differ)[0]

    def memory(self, dtype: str = "fp32") -> ParamMemory:
        """Training memory of the plan if the weights were stored in ``dtype``.

        Params (and the fixed A of A+B), one gradient per trainable element and the
        optimizer state of :attr:`counts`' optimizer, from
        :func:`~workbench.core.models.memory.estimate_memory`; activations not counted.

        Args:
            dtype: ``"fp32"``, ``"bf16"`` or ``"fp16"``.

        Returns:
            The estimate (``fits(24e9)``: does it fit on a 24 GB GPU).

        Raises:
            WorkbenchError: unknown dtype.
        """
        c = self.counts
        return estimate_memory(c.total, c.trainable, dtype, c.optimizer, fixed=self.fixed_params)

    def summary(self) -> str:
        """One line on what the plan does (like :meth:`FreezePlan.summary`, without resolving again)."""
        c = self.counts
        parts = [
            f"{len(self.plan.rules)} rule{'s' if len(self.plan.rules) != 1 else ''}",
            f"trainable {c.trainable:,} of {c.total:,} parameters ({100.0 * c.trainable / max(c.total, 1):.1f}%)",
        ]
        if self.bn_modules:
            parts.append(f"BatchNorm in eval: {self.bn_eval_modules}/{self.bn_modules}")
        if self.reparam_modules:
            parts.append(f"A+B on {self.reparam_modules} modules")
        if self.plan.stages:
            parts.append(f"{len(self.plan.stages)} stages (kept; this window edits the base rules)")
        return "; ".join(parts)

    def node(self, path: str) -> NodeState:
        """The state of the row at ``path``."""
        return self.nodes[path]

    def messages(self) -> list[tuple[str, str, str]]:
        """One line per thing the cost panel warns about.

        Returns:
            ``(severity, one-line text, module path)`` for extension problems, then notes,
            then lint findings (:func:`finding_line`); severity is ``"error"``,
            ``"warning"`` or ``"info"``.
        """
        out: list[tuple[str, str, str]] = []
        for p in self.problems:
            if p.field == "select":
                continue  # selectors that match nothing: the linter reports them
            path = ""
            if p.rule_index is not None and p.stage_index is None and p.rule_index < len(self.plan.rules):
                sel = self.plan.rules[p.rule_index].select
                path = sel if sel in self.tree.nodes else ""
            out.append(("error", str(p), path))
        for n in self.notes:
            out.append(("info", n, ""))
        for f in self.findings:
            out.append((f.severity, finding_line(f), f.path if f.path in self.tree.nodes else ""))
        return out

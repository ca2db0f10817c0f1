"""What the window shows for a plan on a model, computed once per plan edit (Qt-free).

:class:`PlanState` is derived from a :class:`~workbench.core.models.tree.ModelTree` and a
:class:`~workbench.core.plan.rules.FreezePlan` only: one ``plan.resolve(tree)`` and one bottom-up
pass give every tree row its checkbox states and trainable count, the cost panel its
:class:`~workbench.core.freezing.apply.Counts`, and the lint findings. The model itself is never
touched, so a click on a 5,000-module tree costs milliseconds.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Literal, Mapping, NamedTuple

from workbench.core.checks.findings import Finding
from workbench.core.checks.lint import lint_plan
from workbench.core.freezing.apply import Counts, optimizer_state_factor
from workbench.core.models.memory import ParamMemory, estimate_memory
from workbench.core.models.tree import ModelTree, ModuleNode
from workbench.core.plan.param_counts import frozen_elements
from workbench.core.plan.partial_spec import PartialSpec
from workbench.core.plan.readiness import PlanReadiness, check_plan
from workbench.core.plan.reparam_spec import ReparamSpec
from workbench.core.plan.rules import Effective, FreezePlan, PlanProblem, Rule, select_paths

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

    Attributes:
        frozen: Frozen checkbox over the subtree's parameters (a module without parameters
            below it shows its own effective flag); ``"mixed"`` also for partial freezing.
        trainable: trainable parameter elements in the subtree.
        reparam: A+B over the subtree's parameters; None when there are no parameters.
        bn: BN eval over the BatchNorm modules in the subtree; None when there are none.
        bn_auto: every BatchNorm module below follows ``frozen`` (no explicit ``bn_eval``).
        lr_scale: the module's own effective lr_scale.
        partial: the module's own sub-tensor freezing spec, if any.
        partial_below: some module in the subtree has sub-tensor freezing.
        lr_ignored: lr_scale differs from 1 but every parameter below is frozen.
        reparam_text: the A+B in force on the module: ``"full"``, ``"r=8"``, or ``""``.
    """

    frozen: Tri
    trainable: int
    reparam: Tri | None
    bn: Tri | None
    bn_auto: bool
    lr_scale: float
    partial: PartialSpec | None = None
    partial_below: bool = False
    lr_ignored: bool = False
    reparam_text: str = ""


def _reparam_bytes(
    path: str, spec: ReparamSpec, own: int, own_bytes: int, shapes: Mapping[str, tuple[int, ...]]
) -> int:
    """Bytes of the fixed tensors A that A+B adds to a module (``own_bytes`` when ``spec``
    names no parameters, or their shapes are not known)."""
    names = spec.params
    if not names or own <= 0:
        return own_bytes
    numel = 0
    for name in names:
        shape = shapes.get(f"{path}.{name}" if path else str(name))
        if shape is None:
            return own_bytes
        numel += math.prod(shape)
    return own_bytes * min(numel, own) // own


#: Layer types low-rank A+B adapts (others in a rule's reach keep plain parameters).
_LOW_RANK_TYPES = ("Linear", "Conv1d", "Conv2d", "Conv1D", "Embedding")


def _low_rank_elements(node: ModuleNode, spec: ReparamSpec, shapes: Mapping[str, tuple[int, ...]]) -> int | None:
    """Elements (U, V and a variant's own, such as DoRA's magnitude) that low-rank A+B adds to a
    layer, or None when the spec is full rank, the layer is not adapted, or its weight's shape is not known."""
    if spec.low_rank is None or node.type_name not in _LOW_RANK_TYPES:
        return None
    shape = shapes.get(f"{node.path}.weight" if node.path else "weight")
    if not shape or len(shape) < 2:
        return None
    if node.type_name in ("Conv1D", "Embedding"):  # weight is in x out
        return spec.low_rank.added_elements(shape[1], shape[0])
    return spec.low_rank.added_elements(shape[0], math.prod(shape[1:]))


@dataclass
class _Layout:
    """The static shape of a tree as flat lists in pre-order (index 0 is the root)."""

    paths: list[str]
    parent: list[int]
    own: list[int]
    total: list[int]
    is_bn: list[bool]
    bn_total: list[int]


_LAYOUTS: dict[int, tuple[ModelTree, _Layout]] = {}


def _layout(tree: ModelTree) -> _Layout:
    """The flat layout of ``tree``, built once per tree (a few kept)."""
    hit = _LAYOUTS.get(id(tree))
    if hit is not None and hit[0] is tree:
        return hit[1]
    nodes = list(tree.root.walk())
    index = {n.path: i for i, n in enumerate(nodes)}
    parent = [index[n.parent.path] if n.parent is not None else -1 for n in nodes]
    bn_total = [int(n.is_bn) for n in nodes]
    for i in range(len(nodes) - 1, 0, -1):
        bn_total[parent[i]] += bn_total[i]
    lay = _Layout(
        paths=[n.path for n in nodes],
        parent=parent,
        own=[n.own_params for n in nodes],
        total=[n.total_params for n in nodes],
        is_bn=[n.is_bn for n in nodes],
        bn_total=bn_total,
    )
    if len(_LAYOUTS) >= 4:
        _LAYOUTS.clear()
    _LAYOUTS[id(tree)] = (tree, lay)
    return lay


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
        key: ``"frozen"``, ``"bn_eval"``, ``"lr_scale"``, ``"reparam"`` or ``"partial"``.

    Returns:
        The rule index, or None when no rule sets ``key`` for the node (default applies).
    """
    for i in range(len(plan.rules) - 1, -1, -1):
        r = plan.rules[i]
        if not r.sets(key):
            continue
        if key == "partial":  # applies to the modules a selector matches directly
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


@dataclass
class PlanState:
    """Everything the tree and the cost panel show for ``plan`` on ``tree``.

    Build with :meth:`compute`. Immutable by convention: a plan edit makes a new state.

    Attributes:
        tree: the model's tree.
        plan: the plan (not copied: callers never mutate a plan in place).
        effective: ``plan.resolve(tree)``.
        nodes: ``{path: NodeState}``.
        counts: parameters and training memory for ``optimizer``.
        findings: lint findings (pitfalls), most severe first.
        problems: rules that do not fit the model (selectors matching nothing, extension
            specs the model refuses), as :class:`PlanProblem` (for the open-plan dialog
            and "remove rules that match nothing"); the same as ``readiness.problems``.
        readiness: whether the plan fits the model and leaves something trainable (the
            one predicate the trainer uses too).
        notes: other one-line notes (a plan made for a different model).
        explicit: ``{key: set of paths}`` set by plain-path rules (bold in the tree).
        bn_modules / bn_eval_modules: BatchNorm modules, and those in eval mode.
        reparam_modules: modules with parameters that have A+B.
        fixed_params: elements of the fixed tensors A that A+B adds (for :meth:`memory`).
    """

    tree: ModelTree
    plan: FreezePlan
    effective: dict[str, Effective]
    nodes: dict[str, NodeState]
    counts: Counts
    findings: list[Finding] = field(default_factory=list)
    problems: list[PlanProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    explicit: dict[str, set[str]] = field(default_factory=dict)
    bn_modules: int = 0
    bn_eval_modules: int = 0
    reparam_modules: int = 0
    readiness: PlanReadiness = field(default_factory=PlanReadiness)
    fixed_params: int = 0

    @classmethod
    def compute(
        cls,
        tree: ModelTree,
        plan: FreezePlan,
        own_bytes: Mapping[str, int] | None = None,
        optimizer: str = "adamw",
        param_shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> "PlanState":
        """Resolve ``plan`` on ``tree`` and aggregate every row bottom-up.

        Args:
            tree: the model's tree.
            plan: the plan.
            own_bytes: bytes of each module's own parameters (default: 4 per element).
            optimizer: optimizer name for the state bytes (see
                :func:`workbench.core.freezing.apply.optimizer_state_factor`).
            param_shapes: ``{parameter name: shape}`` (canonical names), used to count the
                frozen part of sub-tensor freezing; without it such modules count as trainable.

        Returns:
            The state.

        Raises:
            ValueError: unknown optimizer name.
        """
        optimizer_state_factor(optimizer)  # unknown names fail before any work
        eff = plan.resolve(tree)
        own_frozen = frozen_elements(tree, eff, plan.resolve_params(tree))  # param: rules, partial
        shapes = param_shapes or {}
        lay = _layout(tree)
        n = len(lay.paths)
        effs = [eff[p] for p in lay.paths]
        obytes = [own_bytes.get(p, 4 * o) for p, o in zip(lay.paths, lay.own)] if own_bytes else [4 * o for o in lay.own]
        # subtree accumulators: frozen elements, A+B elements, BN in eval, BN following frozen, partial modules
        fz, rp, be, ba, pa = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
        ad = [0] * n  # elements low-rank A+B adds (U and V)
        frozen_bytes = fixed_bytes = fixed_params = reparam_modules = added_bytes = 0
        own_l, parent_l, bn_l = lay.own, lay.parent, lay.is_bn
        for i in range(n - 1, -1, -1):  # pre-order reversed: children before their parent
            e = effs[i]
            own = own_l[i]
            if own:
                low = _low_rank_elements(tree.nodes[lay.paths[i]], e.reparam, shapes) if e.reparam else None
                if low is not None:
                    # A is the layer's own weight, held fixed with its bias; U and V follow "frozen"
                    per = obytes[i] // own
                    ad[i] += low
                    added_bytes += low * per
                    fz[i] += own + (low if e.frozen else 0)
                    frozen_bytes += obytes[i] + (low * per if e.frozen else 0)
                elif e.kept:  # "unselected": "keep": as the model has it
                    f = own - tree.nodes[lay.paths[i]].own_trainable
                    fz[i] += f
                    frozen_bytes += obytes[i] * f // own
                else:  # frozen, param: rules and partial freezing, element by element
                    f = own_frozen.get(lay.paths[i], 0)
                    fz[i] += f
                    frozen_bytes += obytes[i] * f // own
                if e.reparam and (e.reparam.low_rank is None or tree.nodes[lay.paths[i]].type_name in _LOW_RANK_TYPES):
                    rp[i] += own
                    reparam_modules += 1
                    if e.reparam.low_rank is None:
                        # A, the fixed copy of the pretrained weights (of the named ones only)
                        fixed_bytes += _reparam_bytes(lay.paths[i], e.reparam, own, obytes[i], shapes)
                        fixed_params += _reparam_bytes(lay.paths[i], e.reparam, own, own, shapes)  # elements
            if bn_l[i]:
                be[i] += e.bn_eval
                ba[i] += not e.bn_eval_explicit
            if e.partial:
                pa[i] += 1
            j = parent_l[i]
            if j >= 0:
                fz[j] += fz[i]
                ad[j] += ad[i]
                rp[j] += rp[i]
                be[j] += be[i]
                ba[j] += ba[i]
                pa[j] += pa[i]
        nodes: dict[str, NodeState] = {}
        total_l, bn_total_l = lay.total, lay.bn_total
        for i in range(n):
            e = effs[i]
            params, frozen, bn = total_l[i] + ad[i], fz[i], bn_total_l[i]
            if params == 0:
                ftri: Tri = "on" if e.frozen else "off"
            else:
                ftri = "off" if frozen <= 0 else ("on" if frozen >= params else "mixed")
            if pa[i]:
                ftri = "mixed"
            trainable = params - frozen
            r = rp[i] + ad[i]
            nodes[lay.paths[i]] = NodeState(
                ftri,
                trainable,
                ("off" if r <= 0 else ("on" if r >= params else "mixed")) if params else None,
                _tri(be[i], bn) if bn else None,
                bool(bn) and ba[i] == bn,
                e.lr_scale,
                e.partial,
                bool(pa[i]),
                e.lr_scale != 1.0 and params > 0 and trainable == 0,
                e.reparam.short() if e.reparam else "",
            )
        total_bytes = sum(obytes) + added_bytes
        total = tree.total_params + (ad[0] if n else 0)
        trainable_total = nodes[""].trainable if "" in nodes else 0
        train_bytes = total_bytes - frozen_bytes
        counts = Counts.from_totals(total, trainable_total, total_bytes, train_bytes, fixed_bytes, optimizer)
        readiness = check_plan(plan, tree, effective=eff)
        problems = list(readiness.problems)
        notes: list[str] = []
        fp = plan.model.get("fingerprint")
        if fp and fp != tree.fingerprint:
            notes.append(
                "the plan was made for a model with other parameter names or shapes; "
                "rules are applied by module path"
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            findings = lint_plan(plan, tree, optimizer)
        order = {"error": 0, "warning": 1, "info": 2}
        findings = sorted(findings, key=lambda f: order.get(f.severity, 3))
        explicit = {k: explicit_paths(plan, k) for k in ("frozen", "bn_eval", "lr_scale", "reparam")}
        return cls(
            tree, plan, eff, nodes, counts, findings, problems, notes, explicit,
            bn_modules=bn_total_l[0] if n else 0, bn_eval_modules=be[0] if n else 0,
            reparam_modules=reparam_modules, readiness=readiness, fixed_params=fixed_params,
        )

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

"""Static pitfalls of a plan against a model's tree, found without running anything.

The GUI's cost panel shows these as one-line warnings on every edit, and the freeze doctor
includes them, so :func:`lint_plan` must stay fast (one plan resolution, one pass over the
tree).
"""

from __future__ import annotations

from collections.abc import Mapping

from workbench.core.checks.adapters import lint_low_rank
from workbench.core.checks.bn_stats import fixed_stats_finding
from workbench.core.checks.checkpoint_lint import checkpoint_findings
from workbench.core.checks.findings import Finding
from workbench.core.plan.keys import Effective
from workbench.core.plan.readiness import plan_leaves_trainable
from workbench.core.plan.rules import FreezePlan, select_paths
from workbench.core.plan.tree import ModelTree, ModuleNode

__all__ = ["head_path", "lint_plan", "unfreeze_head_fix"]


#: Attribute names a classification head goes by, in the order :func:`~workbench.core.models.heads.find_head` tries them.
_HEAD_NAMES = ("fc", "head", "classifier", "heads", "lm_head")


def _last_linear(node: ModuleNode) -> str | None:
    found = [n for n in node.walk() if n.type_name == "Linear" and n.own_params]
    return max(found, key=lambda n: n.order).path if found else None


def head_path(tree: ModelTree) -> str | None:
    """The model's own head, read from its tree: a top-level ``fc`` / ``head`` / ``classifier`` /
    ``heads`` / ``lm_head`` (its last Linear when it is a container), else the last Linear in
    module order, else the last module that has parameters.

    Args:
        tree: the model's tree.

    Returns:
        The head's module path, or None when no module has parameters.
    """
    for name in _HEAD_NAMES:
        node = tree.nodes.get(name)
        if node is not None and node.total_params:
            return node.path if node.own_params else (_last_linear(node) or node.path)
    last = _last_linear(tree.root)
    if last is not None:
        return last
    owners = [n for n in tree.nodes.values() if n.own_params]
    return max(owners, key=lambda n: n.order).path if owners else None


def unfreeze_head_fix(tree: ModelTree | None) -> str:
    """What to do when every parameter is frozen, naming the model's own head.

    Args:
        tree: the model's tree (None: the head is not known).

    Returns:
        ``unfreeze at least the head (`classifier`)``, or a generic line without a tree.
    """
    head = head_path(tree) if tree is not None else None
    return f"unfreeze at least the head (`{head}`)" if head else "unfreeze at least the model's head (its last layer)"


def lint_plan(
    plan: FreezePlan, tree: ModelTree, optimizer: str = "adamw", effective: Mapping[str, Effective] | None = None
) -> list[Finding]:
    """Find pitfalls a plan has on a model.

    Args:
        plan: the plan.
        tree: the model's tree.
        optimizer: the optimizer that will be used (for cost wording only).
        effective: ``plan.resolve(tree)`` when the caller has it already.

    Returns:
        Findings, errors first, then warnings, then info; each once per module.
    """
    out: list[Finding] = []
    for problem in plan.unmatched(tree):
        out.append(
            Finding(
                "unmatched-selector",
                "error",
                "",
                f"rule {problem.rule_index}: {problem.message}",
                "the rule does nothing on this model",
                "fix the selector or delete the rule",
            )
        )
    eff = effective if effective is not None else plan.resolve(tree)
    nodes = tree.nodes
    if tree.total_params and not plan_leaves_trainable(plan, tree, eff):
        out.append(
            Finding(
                "nothing-trainable",
                "error",
                "",
                "every parameter is frozen",
                "the optimizer would get no parameters and training cannot start",
                unfreeze_head_fix(tree),
            )
        )
    fixed_stats: list[str] = []  # BatchNorm whose statistics never move, in train mode
    for path, node in nodes.items():
        e = eff[path]
        if node.bn_stats_fixed and not (e.bn_eval or e.eval):
            fixed_stats.append(path)
        elif node.is_bn and e.frozen and e.bn_eval_explicit and not e.bn_eval:
            out.append(
                Finding(
                    "bn-frozen-train-mode",
                    "warning",
                    path,
                    "frozen BatchNorm runs in train mode (bn_eval: false)",
                    "its running statistics keep drifting with every batch although its weights are frozen",
                    "remove bn_eval: false (frozen BatchNorm then runs in eval mode)",
                )
            )
    if fixed_stats:
        out.append(fixed_stats_finding(tree, fixed_stats))
    # A+B on frozen modules: one finding per frozen A+B subtree, at its top
    wasted = [p for p, node in nodes.items() if eff[p].reparam and eff[p].frozen and node.own_params]
    tops: dict[str, int] = {}
    for path in wasted:
        top = path
        while top:
            parent = top.rpartition(".")[0]
            if not (eff[parent].reparam and eff[parent].frozen):
                break
            top = parent
        tops[top] = tops.get(top, 0) + 1
    for top, count in tops.items():
        out.append(
            Finding(
                "reparam-frozen",
                "info",
                top,
                "A+B on a frozen module: B is frozen too"
                + (f" ({count} modules in this subtree)" if count > 1 else ""),
                "the parametrization costs a little compute and memory for nothing",
                "unfreeze the module, or switch A+B off here",
            )
        )
    # lr_scale findings are about what rules say explicitly, per rule (not per module)
    for i, rule in enumerate(plan.rules):
        if rule.lr_scale is None:
            continue
        owning = [p for p in select_paths(rule.select, tree) if nodes[p].own_params]
        if owning and all(eff[p].frozen for p in owning):
            out.append(
                Finding(
                    "lr-scale-on-frozen",
                    "warning",
                    rule.select,
                    f"rule {i} sets lr× {rule.lr_scale:g} on modules whose parameters are all frozen",
                    "the learning rate of frozen parameters has no effect",
                    "unfreeze the module or remove its lr×",
                )
            )
        elif rule.lr_scale == 0 and any(not eff[p].frozen and eff[p].lr_scale == 0 for p in owning):
            out.append(
                Finding(
                    "lr-scale-zero",
                    "warning",
                    rule.select,
                    f"rule {i} trains parameters with lr× 0",
                    f"their gradients and {optimizer} state are computed and stored but never move a weight",
                    "freeze those modules instead of setting lr× 0",
                )
            )
    for i, rule in enumerate(plan.rules):
        verdict = rule.reparam.changes_function() if rule.reparam else False
        if verdict is not False:
            what = "does not equal" if verdict else "comes from a file and may not equal"
            out.append(
                Finding(
                    "reparam-changes-function",
                    "warning",
                    rule.select,
                    f"rule {i}: A + B {what} the loaded weights at the start",
                    "the model's function changes before training: the pretrained behaviour is lost",
                    'use "a": "current" with "b_init": "zeros" to start exactly at the pretrained model',
                )
            )
    if any(r.reparam is not None and r.reparam.low_rank is not None for r in plan.rules):
        out += lint_low_rank(plan, tree)
    out.extend(checkpoint_findings(eff, tree))
    order = {"error": 0, "warning": 1, "info": 2}
    out.sort(key=lambda f: order[f.severity])
    return out

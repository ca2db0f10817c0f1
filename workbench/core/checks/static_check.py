"""The doctor's static check: a model (and its optimizer and plan) as it stands.

See :mod:`workbench.core.checks.doctor` for what it finds; :func:`check` is re-exported there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench.core.checks import bn_stats
from workbench.core.checks.adapters import adapter_findings
from workbench.core.checks.findings import Finding
from workbench.core.checks.grouping import (
    common_path,
    group_findings,
    grouped_paths,
    merge_findings,
    names_text,
    own_parameters,
    unique_params,
)
from workbench.core.checks.lint import lint_plan
from workbench.core.formatting import fmt_bytes, fmt_count
from workbench.core.freezing.apply import optimizer_state_factor
from workbench.core.freezing.capture import (
    a_plus_b_names,
    bn_eval_locked,
    cover_paths,
    fixed_parameter_ids,
    partial_spec,
)
from workbench.core.models.tree import ModelTree, bn_stats_fixed
from workbench.core.plan.rules import FreezePlan

__all__ = ["check"]

#: Kinds of partial freezing the workbench can install (``workbench.core.freezing.partial``).
_PARTIAL_TYPES = ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding")


def _state_bytes(state: Any) -> int:
    if not isinstance(state, dict):
        return 0
    return sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))


def _opt_name(optimizer: torch.optim.Optimizer | None) -> str:
    return type(optimizer).__name__.lower() if optimizer is not None else "adamw"


def check(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    plan: FreezePlan | None = None,
    *,
    probe_hooks: bool = True,
) -> list[Finding]:
    """Find freezing pitfalls in a model as it stands now.

    Args:
        model: the model, in the mode the training loop uses (usually after ``model.train()``):
            BatchNorm checks are made only when the model is in train mode.
        optimizer: the optimizer, to check which parameters it holds.
        plan: the plan the model should follow; adds the plan linter's findings and checks
            that the model follows the plan.
        probe_hooks: call gradient hooks on a tensor of ones to see whether they zero or mask
            gradients (hooks defined inside ``torch`` are never called). False only reports
            that hooks exist.

    Returns:
        Findings, errors first, then warnings, then info. An empty list means no pitfall found.
    """
    tree = ModelTree.from_model(model)
    params = unique_params(model)
    owner = {name: tree.owner_of(name) for name, _ in params}
    out: list[Finding] = []
    if plan is not None:
        linted = lint_plan(plan, tree, _opt_name(optimizer))
        if model.training:  # the model's own BatchNorm modes say it (below), not the plan's
            linted = [f for f in linted if f.code != bn_stats.CODE]
        out += linted
        out += _plan_mismatch(model, tree, plan, params, owner)
    out += _non_leaf(tree, params, owner)
    if optimizer is not None:
        out += _optimizer_findings(model, tree, optimizer, params, owner)
    explicit: set[str] = set()
    if plan is not None:  # frozen BatchNorm the plan trains on purpose: the linter already says it
        explicit = {p for p, e in plan.resolve(tree).items() if e.bn_eval_explicit and not e.bn_eval}
    out += _bn_findings(model, tree, explicit)
    out += _dropout_findings(model, tree)
    out += _hook_findings(model, tree, params, owner, probe_hooks)
    out += _tied_findings(model, tree, params, owner, plan)
    out += adapter_findings(model, tree)
    if plan is None:
        out += _head_findings(model, tree, params, owner)
    return merge_findings(group_findings(merge_findings(out)))


def _non_leaf(tree: ModelTree, params: list[tuple[str, nn.Parameter]], owner: dict[str, str]) -> list[Finding]:
    flagged: dict[str, int] = {}
    universe: dict[str, int] = {}
    retained = 0
    count = 0
    for name, p in params:
        universe[owner[name]] = universe.get(owner[name], 0) + 1
        if not p.is_leaf or p.retains_grad:
            flagged[owner[name]] = flagged.get(owner[name], 0) + 1
            retained += bool(p.retains_grad)
            count += 1
    if not count:
        return []
    where = grouped_paths(tree, flagged, universe)
    extra = f", {retained} with retain_grad()" if retained else ""
    return [
        Finding(
            "non-leaf-parameter",
            "error",
            common_path(where),
            f"{count} parameters are not leaf tensors (they carry a grad_fn{extra}): {names_text(where)}",
            "a parameter written by an in-place op inside forward (param.copy_(A); param.add_(B)) "
            "chains each step's autograd graph to the previous one: step time and memory grow "
            "every step, without bound",
            "compute W = A + B with torch.nn.utils.parametrize instead (plan key "
            '"reparam": {"kind": "a_plus_b"}); never write into parameters inside forward',
        )
    ]


def _optimizer_findings(
    model: nn.Module,
    tree: ModelTree,
    optimizer: torch.optim.Optimizer,
    params: list[tuple[str, nn.Parameter]],
    owner: dict[str, str],
) -> list[Finding]:
    out: list[Finding] = []
    groups_of: dict[int, list[int]] = {}
    for gi, g in enumerate(optimizer.param_groups):
        for p in g["params"]:
            groups_of.setdefault(id(p), []).append(gi)
    universe: dict[str, int] = {}
    for name, _ in params:
        universe[owner[name]] = universe.get(owner[name], 0) + 1
    # frozen parameters in the optimizer
    frozen_in: dict[str, int] = {}
    moving: dict[str, int] = {}
    n_frozen = elems = held = pbytes = n_moving = 0
    for name, p in params:
        if id(p) in groups_of and not p.requires_grad:
            o = owner[name]
            frozen_in[o] = frozen_in.get(o, 0) + 1
            n_frozen += 1
            elems += p.numel()
            pbytes += p.numel() * p.element_size()
            held += _state_bytes(optimizer.state.get(p))
            if p.grad is not None:
                moving[o] = moving.get(o, 0) + 1
                n_moving += 1
    if n_frozen:
        where = grouped_paths(tree, frozen_in, universe)
        factor = optimizer_state_factor(optimizer)
        out.append(
            Finding(
                "frozen-in-optimizer",
                "warning",
                common_path(where),
                f"{n_frozen} frozen parameters ({fmt_count(elems)} elements) are in the optimizer: {names_text(where)}",
                f"they hold {fmt_bytes(held)} of optimizer state now and would hold "
                f"{fmt_bytes(pbytes * factor)} ({factor}x their size) once they get a gradient, "
                "e.g. after unfreezing without rebuilding the optimizer",
                "build the optimizer from trainable parameters only: "
                "[p for p in model.parameters() if p.requires_grad], or applied.param_groups(lr)",
            )
        )
    if n_moving:
        where = grouped_paths(tree, moving, universe)
        out.append(
            Finding(
                "frozen-param-stepped",
                "error",
                common_path(where),
                f"{n_moving} frozen parameters in the optimizer still have a .grad: {names_text(where)}",
                "the optimizer updates every parameter that has a gradient: momentum and weight decay "
                "keep changing these 'frozen' weights",
                "set their .grad to None (optimizer.zero_grad(set_to_none=True)) and take them out of the optimizer",
            )
        )
    # trainable parameters missing from the optimizer
    missing: dict[str, int] = {}
    n_missing = m_elems = 0
    for name, p in params:
        if p.requires_grad and p.is_leaf and id(p) not in groups_of:
            missing[owner[name]] = missing.get(owner[name], 0) + 1
            n_missing += 1
            m_elems += p.numel()
    if n_missing:
        where = grouped_paths(tree, missing, universe)
        out.append(
            Finding(
                "trainable-not-in-optimizer",
                "error",
                common_path(where),
                f"{n_missing} trainable parameters ({fmt_count(m_elems)} elements) are not in the optimizer: {names_text(where)}",
                "their gradients are computed every step but they never change (a head replaced "
                "after the optimizer was created?)",
                "create the optimizer after freezing and replacing modules, from "
                "[p for p in model.parameters() if p.requires_grad] or applied.param_groups(lr); "
                "or freeze them if they should not train",
            )
        )
    # the same parameter in two groups
    names = {id(p): n for n, p in params}
    dup = [(pid, gs) for pid, gs in groups_of.items() if len(gs) > 1]
    if dup:
        dpaths = sorted({owner.get(names.get(pid, ""), "") for pid, _ in dup if pid in names}, key=lambda p: tree.nodes[p].order)
        first = names.get(dup[0][0], "a parameter")
        out.append(
            Finding(
                "param-in-two-groups",
                "error",
                common_path(dpaths),
                f"{len(dup)} parameters appear more than once in the optimizer's param groups "
                f"(e.g. {first} in groups {', '.join(map(str, dup[0][1]))})",
                "each step updates them once per appearance, with whichever learning rate and "
                "weight decay each group has",
                "list every parameter once: applied.param_groups(lr) groups trainable parameters by lr_scale",
            )
        )
    return out


def _bn_findings(model: nn.Module, tree: ModelTree, explicit_train: set[str]) -> list[Finding]:
    if not model.training:
        return []
    frozen_train: list[str] = []
    unlocked: list[str] = []
    fixed_stats: list[str] = []
    for path, node in tree.nodes.items():
        if not node.is_bn:
            continue
        m = model.get_submodule(path) if path else model
        if getattr(m, "running_mean", None) is None:  # track_running_stats=False: no stats to drift
            continue
        own = own_parameters(m)
        frozen = bool(own) and not any(p.requires_grad for p in own)
        if m.training and bn_stats_fixed(m):  # batch statistics in training, stored ones never move
            fixed_stats.append(path)
        elif m.training and frozen:
            if path not in explicit_train:
                frozen_train.append(path)
        elif not m.training and not bn_eval_locked(m):
            unlocked.append(path)
    bns = [p for p, n in tree.nodes.items() if n.is_bn]
    out: list[Finding] = []
    if frozen_train:
        where = cover_paths(tree, frozen_train, [p for p in bns if p not in set(frozen_train)])
        out.append(
            Finding(
                "bn-frozen-train-mode",
                "warning",
                common_path(where),
                f"{len(frozen_train)} frozen BatchNorm modules run in train mode: {names_text(where)}",
                "their running statistics drift with every batch although their weights are frozen; "
                "the model you evaluate is not the one you froze",
                "keep them in eval mode with a plan (bn_eval follows frozen by default: "
                "workbench.apply_plan), or lock them as the exported script's keep_bn_eval() does",
            )
        )
    if fixed_stats:
        out.append(bn_stats.fixed_stats_finding(tree, fixed_stats))
    if unlocked:
        where = cover_paths(tree, unlocked, [p for p in bns if p not in set(unlocked)])
        out.append(
            Finding(
                "bn-eval-unlocked",
                "warning",
                common_path(where),
                f"{len(unlocked)} BatchNorm modules were put in eval mode by hand: {names_text(where)}",
                "the next model.train() (every epoch, after validation) puts them back in train mode "
                "and their running statistics start drifting",
                "lock them: a plan with bn_eval (workbench.apply_plan keeps them in eval across "
                "model.train()), or override train() on those instances as the exported script does",
            )
        )
    return out


def _drop_rate(m: nn.Module) -> float:
    """The drop probability of a Dropout, DropPath or StochasticDepth module (0 for others)."""
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return float(m.p)
    if type(m).__name__ in ("DropPath", "StochasticDepth"):
        rate = getattr(m, "drop_prob", getattr(m, "p", 0.0))
        return float(rate) if isinstance(rate, (int, float)) else 0.0
    return 0.0


def _dropout_findings(model: nn.Module, tree: ModelTree) -> list[Finding]:
    """Dropout (or drop-path) in train mode inside a frozen subtree."""
    if not model.training:
        return []
    noisy: list[str] = []
    drops: list[str] = []
    for path, node in tree.nodes.items():
        parent = node.parent
        if parent is None:
            continue
        m = model.get_submodule(path)
        if _drop_rate(m) <= 0:
            continue
        drops.append(path)
        if m.training and parent.total_params and not parent.trainable_params:
            noisy.append(path)
    if not noisy:
        return []
    where = cover_paths(tree, noisy, [p for p in drops if p not in set(noisy)])
    return [
        Finding(
            "dropout-in-frozen",
            "warning",
            common_path(where),
            f"{len(noisy)} dropout modules run in train mode inside frozen modules: {names_text(where)}",
            "the frozen features are noisy while training and clean at evaluation: what trains after "
            "them learns on features it never sees at test time",
            "keep the frozen part in eval mode: a rule with \"eval\": true on it (workbench.apply_plan "
            "keeps it in eval across model.train())",
        )
    ]


# ---------------------------------------------------------------------- gradient hooks
@dataclass
class _Probe:
    zero_fraction: float | None  # None: could not be probed
    mask: torch.Tensor | None = None


def _probe_hook(fn: Callable[..., Any], p: nn.Parameter, post: bool) -> _Probe:
    try:
        with torch.no_grad():
            if post:
                saved = p.grad
                try:
                    p.grad = torch.ones_like(p)
                    fn(p)
                    res = p.grad
                finally:
                    p.grad = saved
            else:
                g = torch.ones_like(p)
                r = fn(g)
                res = r if r is not None else g
        if not isinstance(res, torch.Tensor) or tuple(res.shape) != tuple(p.shape):
            return _Probe(None)
        zero = res == 0
        return _Probe(float(zero.float().mean()), zero.cpu())
    except Exception:  # a hook with expectations the probe does not meet
        return _Probe(None)


def _ranges(keep: list[bool]) -> list[list[int]]:
    out: list[list[int]] = []
    for i, k in enumerate(keep):
        if k:
            if out and out[-1][1] == i:
                out[-1][1] = i + 1
            else:
                out.append([i, i + 1])
    return out


def _partial_suggestion(zero: torch.Tensor, module: nn.Module, pname: str, path: str) -> str | None:
    """A ``partial`` rule equivalent to the mask, when the mask selects whole rows or columns."""
    if pname != "weight" or type(module).__name__ not in _PARTIAL_TYPES or zero.dim() < 2:
        return None
    for dim in (0, 1):
        other = [d for d in range(zero.dim()) if d != dim]
        z = zero.permute(dim, *other).reshape(zero.shape[dim], -1)
        if bool((z == z[:, :1]).all()):
            keep = [not bool(v) for v in z[:, 0]]
            if any(keep) and not all(keep):
                spec = {"param": "weight", "dim": dim, "trainable": _ranges(keep)}
                import json

                return json.dumps({"select": path or "*", "partial": spec})
    return None


def _hook_findings(
    model: nn.Module,
    tree: ModelTree,
    params: list[tuple[str, nn.Parameter]],
    owner: dict[str, str],
    probe: bool,
) -> list[Finding]:
    out: list[Finding] = []
    for name, p in params:
        hooks = [(fn, False) for fn in (getattr(p, "_backward_hooks", None) or {}).values()]
        hooks += [(fn, True) for fn in (getattr(p, "_post_accumulate_grad_hooks", None) or {}).values()]
        hooks = [(fn, post) for fn, post in hooks if not str(getattr(fn, "__module__", "") or "").startswith("torch")]
        if not hooks:
            continue
        path = owner[name]
        pname = name.rpartition(".")[2]
        if not probe:
            out.append(
                Finding(
                    "grad-hook",
                    "info",
                    path,
                    f"{name} has {len(hooks)} gradient hook(s) (not probed)",
                    "a hook that zeroes or masks a gradient saves no compute: the full gradient is computed first",
                    "run the doctor with probe_hooks=True to see whether they mask",
                )
            )
            continue
        for fn, post in hooks:
            res = _probe_hook(fn, p, post)
            if res.zero_fraction is None:
                out.append(
                    Finding(
                        "grad-hook",
                        "info",
                        path,
                        f"{name} has a gradient hook the doctor could not probe",
                        "if it zeroes or masks the gradient, the full gradient is still computed first",
                        "freeze whole tensors with requires_grad, or slices with the plan key \"partial\"",
                    )
                )
            elif res.zero_fraction >= 1.0:
                out.append(
                    Finding(
                        "grad-hook-zeroes",
                        "warning",
                        path,
                        f"a gradient hook zeroes the whole gradient of {name}",
                        "the full gradient is still computed every step and then thrown away; with weight "
                        "decay (AdamW) the 'frozen' weight still moves",
                        f"freeze it instead: {name}.requires_grad_(False) (plan: {{\"select\": \"{path or '*'}\", "
                        "\"frozen\": true}) and leave it out of the optimizer",
                    )
                )
            elif res.zero_fraction > 0.0:
                assert res.mask is not None
                module = model.get_submodule(path) if path else model
                rule = _partial_suggestion(res.mask, module, pname, path)
                fix = (
                    f"freeze the slice for real with sub-tensor freezing (workbench.core.freezing.partial): plan rule {rule}"
                    if rule
                    else "freeze the slice for real with the plan key \"partial\" (sub-tensor freezing splits "
                    "the computation so the frozen part gets no weight gradient)"
                )
                out.append(
                    Finding(
                        "grad-hook-mask",
                        "warning",
                        path,
                        f"a gradient hook masks {100 * res.zero_fraction:.0f}% of the gradient of {name}",
                        "masking saves nothing: the full gradient is computed first, the optimizer keeps "
                        "state for the whole tensor, and weight decay still moves the masked entries",
                        fix,
                    )
                )
    return out


def _tied_findings(
    model: nn.Module,
    tree: ModelTree,
    params: list[tuple[str, nn.Parameter]],
    owner: dict[str, str],
    plan: FreezePlan | None,
) -> list[Finding]:
    out: list[Finding] = []
    if plan is not None:
        eff = plan.resolve(tree)
        by_id: dict[int, list[str]] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), []).append(name)
        for names in by_id.values():
            if len(names) < 2:
                continue
            owners = [tree.owner_of(n) for n in names]
            states = {eff[o].frozen for o in owners}
            if len(states) > 1:
                frozen = [n for n, o in zip(names, owners) if eff[o].frozen]
                trained = [n for n, o in zip(names, owners) if not eff[o].frozen]
                out.append(
                    Finding(
                        "tied-partly-frozen",
                        "warning",
                        common_path(owners),
                        f"{', '.join(names)} are one tensor (tied weights); the plan freezes {frozen[0]} "
                        f"but trains {trained[0]}",
                        "a tensor is frozen or not as a whole: it follows its first name, so the other "
                        "module silently trains or stays frozen against the plan",
                        "freeze or unfreeze tied modules together",
                    )
                )
    # distinct parameters sharing memory, one frozen and one trainable
    by_storage: dict[tuple[str, int], list[tuple[str, nn.Parameter]]] = {}
    for name, p in params:
        if p.numel() == 0 or p.device.type == "meta":
            continue
        try:
            ptr = p.untyped_storage().data_ptr()
        except RuntimeError:  # tensors without storage (some subclasses)
            continue
        if ptr:
            by_storage.setdefault((str(p.device), ptr), []).append((name, p))
    for group in by_storage.values():
        flags = {p.requires_grad for _, p in group}
        if len(group) > 1 and len(flags) > 1:
            frozen = [n for n, p in group if not p.requires_grad]
            trained = [n for n, p in group if p.requires_grad]
            out.append(
                Finding(
                    "tied-partly-frozen",
                    "warning",
                    common_path([owner[n] for n, _ in group]),
                    f"{frozen[0]} (frozen) shares memory with {trained[0]} (trainable)",
                    "every optimizer step on the trainable tensor changes the frozen one too",
                    "freeze both or train both; to keep a frozen copy, clone it: nn.Parameter(w.detach().clone())",
                )
            )
    return out


def _head_findings(
    model: nn.Module, tree: ModelTree, params: list[tuple[str, nn.Parameter]], owner: dict[str, str]
) -> list[Finding]:
    from workbench.core.models.zoo import find_head

    try:
        heads = find_head(model)
    except Exception:  # an architecture the head finder does not understand
        return []
    if not heads:
        return []
    prefixes = tuple(h + "." for h in heads)
    head_p = [p for n, p in params if owner[n] in heads or owner[n].startswith(prefixes)]
    rest = [p for n, p in params if not (owner[n] in heads or owner[n].startswith(prefixes))]
    if head_p and rest and all(p.requires_grad for p in head_p) and not any(p.requires_grad for p in rest):
        return [
            Finding(
                "head-only-trainable",
                "info",
                heads[0],
                f"only the head {names_text(heads)} trains; every other parameter is frozen",
                "a newly created head is trainable by default (new modules have requires_grad=True): "
                "this is linear probing, fine when intended",
                "to fine-tune more, unfreeze the last blocks too (e.g. a plan rule with \"frozen\": false "
                "on the last stage); create the optimizer after replacing the head",
            )
        ]
    return []


def _plan_mismatch(
    model: nn.Module,
    tree: ModelTree,
    plan: FreezePlan,
    params: list[tuple[str, nn.Parameter]],
    owner: dict[str, str],
) -> list[Finding]:
    eff = plan.resolve(tree)
    by_param = plan.resolve_params(tree)  # param: rules and lr_decay
    fixed = fixed_parameter_ids(model)
    wrong: dict[str, int] = {}
    universe: dict[str, int] = {}
    n = 0
    for name, p in params:
        if id(p) in fixed:
            continue
        o = owner[name]
        universe[o] = universe.get(o, 0) + 1
        pe = by_param.get(tree.param_name(name)) or eff[o]
        if p.requires_grad == pe.frozen:
            wrong[o] = wrong.get(o, 0) + 1
            n += 1
    bn_wrong = []
    ext_wrong = []
    for path, node in tree.nodes.items():
        m = model.get_submodule(path) if path else model
        e = eff[path]
        if model.training and ((node.is_bn and e.bn_eval) or e.eval) and m.training:
            bn_wrong.append(path)
        if e.reparam and e.reparam.mode == "exact" and node.own_params and not a_plus_b_names(m):
            ext_wrong.append(path)
        if e.partial and partial_spec(m) is None:
            ext_wrong.append(path)
    out: list[Finding] = []
    if n or bn_wrong or ext_wrong:
        where = grouped_paths(tree, wrong, universe) if n else []
        parts = []
        if n:
            parts.append(f"{n} parameters have requires_grad against the plan ({names_text(where)})")
        if bn_wrong:
            parts.append(f"{len(bn_wrong)} modules the plan keeps in eval (bn_eval, eval) are in train mode")
        if ext_wrong:
            parts.append(f"A+B / sub-tensor freezing of the plan is missing on {names_text(ext_wrong)}")
        out.append(
            Finding(
                "plan-not-applied",
                "error",
                common_path(where + bn_wrong + ext_wrong),
                "the model does not follow the plan: " + "; ".join(parts),
                "training runs with a freezing setup other than the one planned and measured",
                "apply the plan to this model: applied = plan.apply(model), then build the optimizer "
                "from applied.param_groups(lr)",
            )
        )
    return out

"""The freeze doctor: prove a freezing setup is right, statically and over real training steps.

Two entry points, both returning :class:`~workbench.core.checks.findings.Finding` lists (severity,
module path, what is wrong, why it costs, the fix):

- :func:`check` looks at a model (and optionally its optimizer and plan) as it stands:
  frozen parameters in the optimizer, trainable parameters missing from it, the same
  parameter in two groups, frozen BatchNorm in train mode, BatchNorm put in eval by hand
  (the next ``model.train()`` undoes it), parameters that are not leaves or retain their
  gradient (A+B written by hand), gradient hooks that zero or mask gradients, tied weights
  partly frozen, a model that does not follow its plan, and the plan linter's findings.
- :func:`watch` observes real optimizer steps::

      with doctor.watch(model, optimizer, steps=50) as w:
          for x, y in loader:
              optimizer.zero_grad()
              loss = loss_fn(model(x), y)
              loss.backward()
              optimizer.step()          # the watcher records here (a step post-hook)
              if w.done:
                  break
      for f in w.findings():
          print(f.one_line())

  Nothing else is needed inside the loop: the watcher hooks ``optimizer.step``. Passing the
  loss (``w.after_backward(loss)``) adds the size of each step's autograd graph. It reports
  step time or memory growing step over step (a least-squares slope), the autograd graph
  growing, frozen tensors or eval-mode BatchNorm statistics that changed, trainable
  parameters that never get a gradient or only zeros (the ``param.data = A + B`` mistake),
  and NaN/inf gradients.

Findings are grouped: one finding per kind of problem, its ``path`` the deepest module that
contains every affected module, its message naming them briefly.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

from workbench.core.checks.adapters import adapter_findings
from workbench.core.checks.findings import SEVERITIES, Finding
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
from workbench.core.models.tree import ModelTree
from workbench.core.plan.rules import FreezePlan
from workbench.core.training.metrics import MemoryProbe

__all__ = ["Watch", "check", "group_findings", "merge_findings", "watch"]

#: Kinds of partial freezing the workbench can install (``workbench.core.freezing.partial``).
_PARTIAL_TYPES = ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding")
#: Graph traversal stops here (a runaway graph is reported long before).
_GRAPH_LIMIT = 2_000_000


# ====================================================================== helpers
def _common_path(paths: Sequence[str]) -> str:
    if not paths:
        return ""
    parts = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for segs in zip(*parts):
        if all(s == segs[0] for s in segs):
            common.append(segs[0])
        else:
            break
    return ".".join(common)


def _names(paths: Sequence[str], limit: int = 4) -> str:
    if list(paths) == [""]:
        return "across the whole model"
    shown = [p or "(model)" for p in paths[:limit]]
    more = len(paths) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _grouped(tree: ModelTree, flagged: dict[str, int], universe: dict[str, int]) -> list[str]:
    """Cover paths for modules with flagged tensors, blocking modules with unflagged ones.

    A module with both (some parameters flagged, others not) is named itself.
    """
    blocked = [p for p, n in universe.items() if flagged.get(p, 0) < n]
    return cover_paths(tree, [p for p, n in flagged.items() if n], blocked)


def _unique_params(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    seen: set[int] = set()
    out = []
    for name, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def _state_bytes(state: Any) -> int:
    if not isinstance(state, dict):
        return 0
    return sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))


def _opt_name(optimizer: torch.optim.Optimizer | None) -> str:
    return type(optimizer).__name__.lower() if optimizer is not None else "adamw"


def _own_parameters(module: nn.Module) -> list[nn.Parameter]:
    """A module's own parameters, those moved under A+B (``parametrizations``) included."""
    own = list(module.parameters(recurse=False))
    param = getattr(module, "parametrizations", None)
    if isinstance(param, nn.Module):
        own += list(param.parameters())
    return own


def merge_findings(*lists: Iterable[Finding]) -> list[Finding]:
    """Concatenate finding lists without duplicates, errors first.

    Args:
        *lists: finding lists (from :func:`check`, :meth:`Watch.findings`, the linter).

    Returns:
        One list, each finding once, sorted by severity (stable otherwise).
    """
    seen: set[tuple[str, str, str]] = set()
    out: list[Finding] = []
    for lst in lists:
        for f in lst:
            key = (f.code, f.path, f.message)
            if key not in seen:
                seen.add(key)
                out.append(f)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    out.sort(key=lambda f: order[f.severity])
    return out


# ====================================================================== static checks
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
    params = _unique_params(model)
    owner = {name: tree.owner_of(name) for name, _ in params}
    out: list[Finding] = []
    if plan is not None:
        out += lint_plan(plan, tree, _opt_name(optimizer))
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


def group_findings(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per kind (code and severity): later ones of a kind fold into the first.

    The folded finding keeps the first one's message, why and fix, names the other modules
    briefly (``and 3 more like it: layer1, layer2.0, fc``) and its path is the deepest module
    containing them all.

    Args:
        findings: findings in the order they should be reported.

    Returns:
        The grouped findings, in the order of each kind's first finding.
    """
    kinds: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        kinds.setdefault((f.code, f.severity), []).append(f)
    out: list[Finding] = []
    for group in kinds.values():
        first = group[0]
        if len(group) == 1:
            out.append(first)
            continue
        paths = list(dict.fromkeys(f.path for f in group))
        others = list(dict.fromkeys(f.path for f in group[1:]))
        out.append(
            Finding(
                first.code,
                first.severity,
                _common_path(paths),
                f"{first.message} (and {len(group) - 1} more like it: {_names(others)})",
                first.why,
                first.fix,
            )
        )
    return out


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
    where = _grouped(tree, flagged, universe)
    extra = f", {retained} with retain_grad()" if retained else ""
    return [
        Finding(
            "non-leaf-parameter",
            "error",
            _common_path(where),
            f"{count} parameters are not leaf tensors (they carry a grad_fn{extra}): {_names(where)}",
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
        where = _grouped(tree, frozen_in, universe)
        factor = optimizer_state_factor(optimizer)
        out.append(
            Finding(
                "frozen-in-optimizer",
                "warning",
                _common_path(where),
                f"{n_frozen} frozen parameters ({fmt_count(elems)} elements) are in the optimizer: {_names(where)}",
                f"they hold {fmt_bytes(held)} of optimizer state now and would hold "
                f"{fmt_bytes(pbytes * factor)} ({factor}x their size) once they get a gradient, "
                "e.g. after unfreezing without rebuilding the optimizer",
                "build the optimizer from trainable parameters only: "
                "[p for p in model.parameters() if p.requires_grad], or applied.param_groups(lr)",
            )
        )
    if n_moving:
        where = _grouped(tree, moving, universe)
        out.append(
            Finding(
                "frozen-param-stepped",
                "error",
                _common_path(where),
                f"{n_moving} frozen parameters in the optimizer still have a .grad: {_names(where)}",
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
        where = _grouped(tree, missing, universe)
        out.append(
            Finding(
                "trainable-not-in-optimizer",
                "error",
                _common_path(where),
                f"{n_missing} trainable parameters ({fmt_count(m_elems)} elements) are not in the optimizer: {_names(where)}",
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
                _common_path(dpaths),
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
    for path, node in tree.nodes.items():
        if not node.is_bn:
            continue
        m = model.get_submodule(path) if path else model
        if getattr(m, "running_mean", None) is None:  # track_running_stats=False: no stats to drift
            continue
        own = _own_parameters(m)
        frozen = bool(own) and not any(p.requires_grad for p in own)
        if m.training and frozen:
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
                _common_path(where),
                f"{len(frozen_train)} frozen BatchNorm modules run in train mode: {_names(where)}",
                "their running statistics drift with every batch although their weights are frozen; "
                "the model you evaluate is not the one you froze",
                "keep them in eval mode with a plan (bn_eval follows frozen by default: "
                "workbench.apply_plan), or lock them as the exported script's keep_bn_eval() does",
            )
        )
    if unlocked:
        where = cover_paths(tree, unlocked, [p for p in bns if p not in set(unlocked)])
        out.append(
            Finding(
                "bn-eval-unlocked",
                "warning",
                _common_path(where),
                f"{len(unlocked)} BatchNorm modules were put in eval mode by hand: {_names(where)}",
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
            _common_path(where),
            f"{len(noisy)} dropout modules run in train mode inside frozen modules: {_names(where)}",
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
                        _common_path(owners),
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
                    _common_path([owner[n] for n, _ in group]),
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
                f"only the head {_names(heads)} trains; every other parameter is frozen",
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
        where = _grouped(tree, wrong, universe) if n else []
        parts = []
        if n:
            parts.append(f"{n} parameters have requires_grad against the plan ({_names(where)})")
        if bn_wrong:
            parts.append(f"{len(bn_wrong)} modules the plan keeps in eval (bn_eval, eval) are in train mode")
        if ext_wrong:
            parts.append(f"A+B / sub-tensor freezing of the plan is missing on {_names(ext_wrong)}")
        out.append(
            Finding(
                "plan-not-applied",
                "error",
                _common_path(where + bn_wrong + ext_wrong),
                "the model does not follow the plan: " + "; ".join(parts),
                "training runs with a freezing setup other than the one planned and measured",
                "apply the plan to this model: applied = plan.apply(model), then build the optimizer "
                "from applied.param_groups(lr)",
            )
        )
    return out


# ====================================================================== runtime watch
def _slope(ys: Sequence[float]) -> float:
    """Least-squares slope of ``ys`` against 0..n-1."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx = (n - 1) / 2
    my = sum(ys) / n
    sxx = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sxx


def _growth(ys: Sequence[float], rel: float, floor: float) -> tuple[float, float, float] | None:
    """``(slope, first-third median, last-third median)`` when ``ys`` grows, else None.

    Growing means: the fitted line rises by more than ``max(rel * median, floor)`` over the
    series *and* the last third's median exceeds the first third's by that much too, so a
    few slow steps (noise, a garbage collection) do not count.
    """
    n = len(ys)
    if n < 6:
        return None
    b = _slope(ys)
    med = statistics.median(ys)
    k = max(2, n // 3)
    first, last = statistics.median(ys[:k]), statistics.median(ys[-k:])
    need = max(rel * med, floor)
    if b * (n - 1) > need and last - first > need:
        return b, first, last
    return None


def _graph_nodes(roots: Iterable[Any], limit: int = _GRAPH_LIMIT) -> int:
    seen: set[Any] = set()
    stack = [r for r in roots if r is not None]
    while stack and len(seen) < limit:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt not in seen:
                stack.append(nxt)
    return len(seen)


@dataclass
class _GradStats:
    steps_with_grad: int = 0
    nonzero_steps: int = 0
    nonfinite_steps: int = 0


class Watch:
    """Records real training steps and turns them into findings. Create with :func:`watch`.

    Attributes:
        steps: steps to record (None: until :meth:`stop`).
        warmup: first steps left out of the time and memory trends.
        step_ms: wall time of each recorded step (from one optimizer step to the next).
        memory: CUDA allocated bytes (model on CUDA) or process RSS after each step.
        memory_kind: ``"cuda_allocated"``, ``"mps_allocated"`` or ``"rss"``.
        graph_nodes: autograd nodes still reachable from parameters and buffers after each step
            (0 for a correct setup, growing when a graph leaks across steps).
        loss_graph_nodes: size of each step's loss graph, when :meth:`after_backward` gets the loss.
    """

    def __init__(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None, steps: int | None = None, *, warmup: int = 2
    ) -> None:
        if steps is not None and steps < 1:
            raise ValueError(f"steps must be >= 1 or None, got {steps}")
        self.model = model
        self.optimizer = optimizer
        self.steps = steps
        self.warmup = max(0, warmup)
        self.step_ms: list[float] = []
        self.memory: list[float] = []
        self.graph_nodes: list[int] = []
        self.loss_graph_nodes: list[int] = []
        self.memory_kind = "rss"
        self._device = torch.device("cpu")
        self._handle: Any = None
        self._t_last: float | None = None
        self._grads: dict[str, _GradStats] = {}
        self._trainable_start: set[str] = set()
        self._frozen_start: dict[str, str] = {}
        self._bn_start: dict[str, dict[str, str]] = {}
        self._bn_frozen_start: dict[str, dict[str, str]] = {}
        self._names: dict[int, str] = {}
        self._running = False
        self._finished = False
        self._grads_seen_this_step = False

    # ---------------------------------------------------------- control
    @property
    def done(self) -> bool:
        """True once ``steps`` steps were recorded (the watcher then stops recording)."""
        return self.steps is not None and len(self.step_ms) >= self.steps

    def start(self) -> "Watch":
        """Snapshot frozen tensors and BatchNorm statistics, hook ``optimizer.step``.

        Returns:
            self.
        """
        from workbench.core.checks.verify import tensor_digest

        if self._running:
            return self
        model = self.model
        p0 = next(model.parameters(), None)
        self._device = p0.device if p0 is not None else torch.device("cpu")
        self.memory_kind = {"cuda": "cuda_allocated", "mps": "mps_allocated"}.get(self._device.type, "rss")
        self._memory = MemoryProbe(self._device, reset_peak=False)
        params = _unique_params(model)
        self._names = {id(p): n for n, p in params}
        self._trainable_start = {n for n, p in params if p.requires_grad}
        self._frozen_start = {n: tensor_digest(p) for n, p in params if not p.requires_grad}
        self._grads = {n: _GradStats() for n in self._trainable_start}
        for path, m in model.named_modules():
            if not isinstance(m, nn.modules.batchnorm._BatchNorm) or m.running_mean is None:
                continue
            stats = {k: tensor_digest(v) for k, v in m.named_buffers(recurse=False) if v is not None}
            if not m.training or bn_eval_locked(m):
                self._bn_start[path] = stats
            own = _own_parameters(m)
            if own and not any(p.requires_grad for p in own):
                self._bn_frozen_start[path] = stats
        if self.optimizer is not None:
            self._handle = self.optimizer.register_step_post_hook(lambda opt, args, kwargs: self.step())
        self._t_last = self._now()
        self._running = True
        return self

    def stop(self) -> None:
        """Remove the hook and compare frozen tensors with the snapshot."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self._running:
            self._compare_end()
        self._running = False

    def __enter__(self) -> "Watch":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---------------------------------------------------------- recording
    def _sync(self) -> None:
        if self._device.type == "cuda" and torch.cuda.is_available():
            torch.cuda.synchronize(self._device)
        elif self._device.type == "mps" and hasattr(torch, "mps"):
            torch.mps.synchronize()

    def _now(self) -> float:
        self._sync()
        return time.perf_counter()

    def _memory_now(self) -> float:
        allocated = self._memory.sample()[0]
        if self._memory.kind == "cpu":  # the absolute process RSS (the probe's allocated is growth)
            return float(self._memory.rss or 0)
        return float(allocated or 0)

    def after_backward(self, loss: torch.Tensor | None = None) -> None:
        """Optional, between ``loss.backward()`` and ``optimizer.step()``: record the loss graph size.

        Also records gradient statistics now (useful when the optimizer is not hooked).

        Args:
            loss: the loss of this step (its graph is counted; it may already be backwarded).
        """
        if not self._running or self.done:
            return
        if loss is not None and loss.grad_fn is not None:
            self.loss_graph_nodes.append(_graph_nodes([loss.grad_fn]))
        self._record_grads()

    def step(self) -> None:
        """Record one step. Called by the optimizer hook; call it yourself without an optimizer."""
        if not self._running or self.done:
            return
        t = self._now()
        if self._t_last is not None:
            self.step_ms.append((t - self._t_last) * 1000.0)
        if not self._grads_seen_this_step:
            self._record_grads()
        self._grads_seen_this_step = False
        self.memory.append(self._memory_now())
        roots = [p.grad_fn for p in self.model.parameters() if p.grad_fn is not None]
        roots += [b.grad_fn for b in self.model.buffers() if b.grad_fn is not None]
        self.graph_nodes.append(_graph_nodes(roots))
        if self.done and self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._t_last = self._now()

    def _record_grads(self) -> None:
        self._grads_seen_this_step = True
        by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
        for name, p in self.model.named_parameters():
            st = self._grads.get(name)
            if st is None or p.grad is None:
                continue
            g = p.grad
            if g.is_sparse:
                g = g.coalesce().values()
            by_device.setdefault(g.device, []).append((name, g))
        for items in by_device.values():
            names = [n for n, _ in items]
            grads = [g.detach() for _, g in items]
            try:
                norms = torch.stack(torch._foreach_norm(grads, float("inf"))).float().cpu().tolist()
            except (RuntimeError, TypeError):  # dtypes or layouts foreach does not handle
                norms = [float(g.abs().max()) if g.numel() else 0.0 for g in grads]
            for n, v in zip(names, norms):
                st = self._grads[n]
                st.steps_with_grad += 1
                if not math.isfinite(v):
                    st.nonfinite_steps += 1
                elif v > 0:
                    st.nonzero_steps += 1

    def _compare_end(self) -> None:
        from workbench.core.checks.verify import tensor_digest

        model = self.model
        params = dict(_unique_params(model))
        self._frozen_changed = [
            n
            for n, d in self._frozen_start.items()
            if n in params
            and tensor_digest(params[n]) != d
            and not (params[n].requires_grad and params[n].is_leaf)  # unfrozen on purpose (a stage)
        ]
        self._trainable_end = {n for n, p in params.items() if p.requires_grad and p.is_leaf}
        modules = dict(model.named_modules())

        def changed(start: dict[str, dict[str, str]]) -> list[str]:
            out = []
            for path, stats in start.items():
                m = modules.get(path)
                if m is None:
                    continue
                now = {k: tensor_digest(v) for k, v in m.named_buffers(recurse=False) if v is not None}
                if any(now.get(k) != v for k, v in stats.items()):
                    out.append(path)
            return out

        self._bn_changed = changed(self._bn_start)
        self._bn_frozen_changed = [p for p in changed(self._bn_frozen_start) if p not in set(self._bn_changed)]
        self._finished = True

    # ---------------------------------------------------------- results
    def findings(self) -> list[Finding]:
        """What the recorded steps show (call after the ``with`` block or :meth:`stop`).

        Returns:
            Findings, errors first. Trends need at least ``warmup + 6`` recorded steps.
        """
        if self._running:
            self.stop()
        tree = ModelTree.from_model(self.model)
        owner = {n: tree.owner_of(n) for n, _ in _unique_params(self.model)}
        universe: dict[str, int] = {}
        for o in owner.values():
            universe[o] = universe.get(o, 0) + 1
        out: list[Finding] = []
        n_steps = len(self.step_ms)
        ms = self.step_ms[self.warmup :]
        g = _growth(ms, 0.2, 0.0)
        if g is not None:
            b, first, last = g
            out.append(
                Finding(
                    "step-time-growing",
                    "warning",
                    "",
                    f"step time grows by {b:.2f} ms per step ({first:.1f} ms → {last:.1f} ms over {len(ms)} steps)",
                    "each step is slower than the one before: training slows down without bound",
                    "look for state carried across steps: parameters written inside forward, tensors kept "
                    "with their graph (append loss.item(), not loss), retain_grad()",
                )
            )
        mem = self.memory[self.warmup :]
        floor = 1 << 20 if self.memory_kind != "rss" else 32 << 20
        g = _growth(mem, 0.05, float(floor))
        if g is not None:
            b, first, last = g
            out.append(
                Finding(
                    "memory-growing",
                    "warning",
                    "",
                    f"memory ({self.memory_kind}) grows by {fmt_bytes(int(b))} per step "
                    f"({fmt_bytes(int(first))} → {fmt_bytes(int(last))} over {len(mem)} steps)",
                    "memory that grows every step ends in an out-of-memory error",
                    "look for tensors kept across steps with their autograd graph, or retain_grad() on "
                    "tensors computed in forward",
                )
            )
        nodes = self.graph_nodes[self.warmup :] or self.graph_nodes
        loss_nodes = self.loss_graph_nodes[self.warmup :] or self.loss_graph_nodes
        for series, what in ((nodes, "reachable from the parameters"), (loss_nodes, "of the loss")):
            if len(series) >= 3 and series[-1] > series[0] and _slope(series) >= 0.5:
                out.append(
                    Finding(
                        "graph-growing",
                        "error",
                        "",
                        f"the autograd graph {what} grows every step ({series[0]} → {series[-1]} nodes "
                        f"over {len(series)} steps)",
                        "each step's graph is chained to the previous one, so backward gets slower and "
                        "memory grows every step",
                        "do not write into parameters inside forward (param.copy_/add_ + retain_grad): use "
                        'torch.nn.utils.parametrize for W = A + B (plan key "reparam")',
                    )
                )
                break
        if not self._finished:
            return merge_findings(out)
        if self._frozen_changed:
            flagged: dict[str, int] = {}
            for n in self._frozen_changed:
                flagged[owner.get(n, "")] = flagged.get(owner.get(n, ""), 0) + 1
            where = _grouped(tree, flagged, universe)
            out.append(
                Finding(
                    "frozen-changed",
                    "error",
                    _common_path(where),
                    f"{len(self._frozen_changed)} frozen parameters changed during training: {_names(where)}",
                    "weights you froze are not the pretrained ones any more (written in forward, "
                    "param.data = ..., or stepped by the optimizer with an old gradient)",
                    "never assign parameter .data in the training loop; keep frozen parameters out of the "
                    "optimizer; check with applied.verify()",
                )
            )
        bns = [p for p, n in tree.nodes.items() if n.is_bn]

        def bn_cover(paths: list[str]) -> list[str]:
            return cover_paths(tree, paths, [p for p in bns if p not in set(paths)])

        if self._bn_changed:
            where = bn_cover(self._bn_changed)
            out.append(
                Finding(
                    "bn-eval-stats-changed",
                    "error",
                    _common_path(where),
                    f"running statistics of {len(self._bn_changed)} BatchNorm modules in eval mode changed: "
                    f"{_names(where)}",
                    "a model.train() inside the loop put them back in train mode; they drift with every batch",
                    "lock them in eval mode with a plan (bn_eval) so model.train() cannot undo it",
                )
            )
        if self._bn_frozen_changed:
            where = bn_cover(self._bn_frozen_changed)
            out.append(
                Finding(
                    "bn-frozen-train-mode",
                    "warning",
                    _common_path(where),
                    f"running statistics of {len(self._bn_frozen_changed)} frozen BatchNorm modules changed: "
                    f"{_names(where)}",
                    "their weights are frozen but their statistics follow your data: the frozen part of the "
                    "model changes anyway",
                    "keep frozen BatchNorm in eval mode (plan: bn_eval follows frozen by default)",
                )
            )
        if n_steps:
            kept = self._trainable_start & self._trainable_end
            never = [n for n in kept if self._grads[n].steps_with_grad == 0]
            zero = [
                n
                for n in kept
                if self._grads[n].steps_with_grad and not self._grads[n].nonzero_steps and not self._grads[n].nonfinite_steps
            ]
            nonfinite = [n for n in kept if self._grads[n].nonfinite_steps]
            for names, code, msg, why, fix in (
                (
                    never,
                    "no-gradient",
                    "trainable parameters never received a gradient in {k} steps",
                    "they are not part of the loss's autograd graph: they never train (param.data = A + B "
                    "cuts B out of the graph; so does an unused module)",
                    "compute W = A + B in the graph (torch.nn.utils.parametrize; plan key \"reparam\"), or "
                    "freeze the parameters that are not used",
                ),
                (
                    zero,
                    "zero-gradient",
                    "trainable parameters received only zero gradients in {k} steps",
                    "a zero gradient never moves a weight: these parameters do not train",
                    "check for a gradient hook or mask that zeroes them, or a path where their output is "
                    "multiplied by zero; freeze them if they should not train",
                ),
                (
                    nonfinite,
                    "nonfinite-gradient",
                    "NaN/inf gradients in trainable parameters (in some of {k} steps)",
                    "one non-finite gradient corrupts the weights and the optimizer state",
                    "lower the learning rate, use gradient clipping, or a GradScaler with AMP",
                ),
            ):
                if not names:
                    continue
                flagged = {}
                for n in names:
                    flagged[owner.get(n, "")] = flagged.get(owner.get(n, ""), 0) + 1
                where = _grouped(tree, flagged, universe)
                out.append(
                    Finding(code, "error", _common_path(where), f"{len(names)} " + msg.format(k=n_steps) + f": {_names(where)}", why, fix)
                )
        return merge_findings(out)

    def summary(self) -> dict[str, Any]:
        """Recorded series and their trends, JSON-ready (for the CLI's ``--json`` and the GUI)."""
        ms = self.step_ms[self.warmup :]
        mem = self.memory[self.warmup :]
        return {
            "steps": len(self.step_ms),
            "warmup": self.warmup,
            "step_ms": list(self.step_ms),
            "step_ms_median": statistics.median(ms) if ms else None,
            "step_ms_slope": _slope(ms) if len(ms) > 1 else None,
            "memory_kind": self.memory_kind,
            "memory": list(self.memory),
            "memory_slope": _slope(mem) if len(mem) > 1 else None,
            "graph_nodes": list(self.graph_nodes),
            "loss_graph_nodes": list(self.loss_graph_nodes),
        }


def watch(
    model: nn.Module, optimizer: torch.optim.Optimizer | None = None, steps: int | None = None, *, warmup: int = 2
) -> Watch:
    """Watch real training steps for runtime freezing pitfalls.

    Use it as a context manager around the training loop; it hooks ``optimizer.step`` so the
    loop needs no change (see the module docstring). Without an optimizer, call
    :meth:`Watch.step` after each step yourself.

    Frozen tensors and BatchNorm statistics are hashed at the start and compared at the end;
    gradients are inspected at every step (one reduction per device, one host sync); on
    CUDA each step synchronizes the device so step times are real.

    Args:
        model: the model being trained.
        optimizer: its optimizer (hooked with ``register_step_post_hook``).
        steps: record this many steps, then stop recording (``w.done`` turns True); None
            records until the ``with`` block ends.
        warmup: first steps left out of the time and memory trends.

    Returns:
        The :class:`Watch` (not started: use ``with`` or :meth:`Watch.start`).

    Raises:
        ValueError: ``steps`` < 1.
    """
    return Watch(model, optimizer, steps, warmup=warmup)

"""Candidate freeze plans, generated from the model's structure.

The model's *block sequence* is the ordered list of its top-level children that hold
parameters and have submodules of their own, in execution order (torchvision ResNets:
``layer1`` .. ``layer4``). When one child holds nearly all parameters (a ViT's ``encoder``,
its ``layers``; the ``features`` of a ConvNeXt or an EfficientNet), the sequence is taken
inside it. Leaf children (a stem convolution, a final norm) are not blocks.

From it: head only; the last k blocks for k = 1..n (n: unless that trains everything), each with everything that runs after
them (final norm, head); full fine-tuning; and, for models with BatchNorm, each of those
with BatchNorm kept in eval mode (running statistics, affine parameters still training).
Every candidate is a :class:`~workbench.core.plan.FreezePlan` valid for the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from workbench.core.advisor.profile import ModelProfile
from workbench.core.models.tree import ModelTree, is_batchnorm
from workbench.core.models.zoo import find_head
from workbench.core.plan import FreezePlan, Rule

__all__ = ["Candidate", "block_sequence", "generate_candidates", "trainable_names"]

#: A child holding at least this share of its parent's parameters is looked into.
_DOMINANT_SHARE = 0.9
_BN_SELECT = "type:_BatchNorm"


@dataclass(frozen=True)
class Candidate:
    """One candidate plan.

    Attributes:
        name: what it trains, for people (``"last 2 blocks (layer3..layer4) + head"``).
        plan: the freeze plan.
        kind: ``"head"``, ``"last_k"`` or ``"full"``.
        k: blocks trained (0 for head only; all blocks for full fine-tuning).
        bn_eval: BatchNorm modules run on running statistics.
    """

    name: str
    plan: FreezePlan
    kind: str
    k: int
    bn_eval: bool = False


def _param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _children_in_order(module: nn.Module, prefix: str, order: dict[str, int]) -> list[tuple[str, nn.Module]]:
    kids = [(f"{prefix}.{n}" if prefix else n, m) for n, m in module.named_children() if _param_count(m)]
    return sorted(kids, key=lambda item: order.get(item[0], len(order)))


def block_sequence(model: nn.Module, profile: ModelProfile) -> list[str]:
    """The model's top-level block sequence (see the module docstring).

    Args:
        model: the model.
        profile: its profile (gives the execution order).

    Returns:
        Dotted module paths of the blocks, in execution order; empty if the model has none.
    """
    order = {p: i for i, p in enumerate(profile.module_order)}
    prefix, module = "", model
    levels: list[list[str]] = []
    while True:
        kids = _children_in_order(module, prefix, order)
        levels.append([p for p, m in kids if sum(1 for _ in m.children()) and p in order])
        total = _param_count(module)
        dominant = [(p, m) for p, m in kids if total and _param_count(m) >= _DOMINANT_SHARE * total]
        if len(dominant) != 1 or not sum(1 for _ in dominant[0][1].children()):
            break
        prefix, module = dominant[0]
    return next((lv for lv in reversed(levels) if len(lv) >= 2), levels[0])


def _after(path: str, profile: ModelProfile, tree: ModelTree) -> list[str]:
    """Top-most param-holding modules that first run after ``path`` and are not inside it."""
    order = {p: i for i, p in enumerate(profile.module_order)}
    start = order[path]
    out: list[str] = []
    for p in profile.module_order[start + 1:]:
        if p == path or p.startswith(path + "."):
            continue
        if any(p == q or p.startswith(q + ".") for q in out):
            continue
        node = tree[p] if p in tree else None
        if node is not None and node.total_params:
            out.append(p)
    return out


def _with_bn_eval(c: Candidate) -> Candidate:
    plan = c.plan.copy()
    plan.rules.append(Rule(_BN_SELECT, bn_eval=True))
    return Candidate(f"{c.name} · BN eval", plan, c.kind, c.k, bn_eval=True)


def _span(blocks: list[str]) -> str:
    return blocks[0] if len(blocks) == 1 else f"{blocks[0]}..{blocks[-1].rpartition('.')[2]}"


def generate_candidates(model: nn.Module, profile: ModelProfile) -> list[Candidate]:
    """The candidate plans for ``model``, from the least to the most trained.

    Args:
        model: the model.
        profile: its profile.

    Returns:
        Head only (when a head is found), last k blocks for k = 1..n, full fine-tuning, and
        BatchNorm-eval variants of each when the model has BatchNorm modules.
    """
    tree = ModelTree.from_model(model)
    head = [p for p in find_head(model) if p in tree]
    blocks = block_sequence(model, profile)
    out: list[Candidate] = []
    if head:
        rules = [Rule("*", frozen=True)] + [Rule(h, frozen=False) for h in head]
        out.append(Candidate("head only", FreezePlan(rules), "head", 0))
    everything = {n for n, _ in model.named_parameters()}
    for k in range(1, len(blocks) + 1):
        last = blocks[-k:]
        train = last + [p for p in _after(last[-1], profile, tree) if p not in last]
        train += [h for h in head if not any(h == t or h.startswith(t + ".") for t in train)]
        rules = [Rule("*", frozen=True)] + [Rule(p, frozen=False) for p in train]
        label = f"last {k} block{'s' if k > 1 else ''} ({_span(last)}) + head"
        cand = Candidate(label, FreezePlan(rules), "last_k", k)
        if trainable_names(cand, model) != everything:  # else it is full fine-tuning
            out.append(cand)
    out.append(Candidate("full fine-tuning", FreezePlan([Rule("*", frozen=False)]), "full", len(blocks)))
    if any(is_batchnorm(m) for m in model.modules()):
        out += [_with_bn_eval(c) for c in out if c.kind != "head"]
    return out


def trainable_names(candidate: Candidate, model: nn.Module) -> set[str]:
    """Names of the parameters ``candidate`` trains on ``model``.

    Args:
        candidate: the candidate.
        model: the model it was generated for.

    Returns:
        Dotted parameter names.
    """
    eff = candidate.plan.resolve(model)
    return {n for n, _ in model.named_parameters() if not eff[n.rpartition(".")[0]].frozen}

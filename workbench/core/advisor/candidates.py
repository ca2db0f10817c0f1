"""Candidate freeze plans, generated from the model's structure.

The model's *block sequence* is the ordered list of its top-level children that hold
parameters and have submodules of their own, in execution order (torchvision ResNets:
``layer1`` .. ``layer4``). When one child holds nearly all parameters (a ViT's ``encoder``,
its ``layers``; the ``features`` of a ConvNeXt or an EfficientNet), the sequence is taken
inside it. Leaf children (a stem convolution, a final norm) are not blocks; a model with no blocks at all
(CREPE: six convolutions, each with its BatchNorm, then a classifier) has *layers* instead:
its top-level children that hold weights, in execution order, a norm layer going with the
layer before it, the head left out (:func:`layer_sequence`). Transformer
stacks that keep their layers in a ``ModuleList`` holding at least half the parameters
(Hugging Face ``bert.encoder.layer``, ``transformer.h``, ``model.layers``) use those layers.

From it: head only; the last k blocks for k = 1..n (n: unless that trains everything), each with everything that runs after
them (final norm, head) — or, given a block order from the gradient-signal probe
(:mod:`~workbench.core.advisor.grad_signal`), the top k blocks of that order instead; low-rank
A+B (fused, ``alpha = 2 r``) on every linear and convolution layer of the blocks at the ranks of
:data:`LOW_RANKS`, and DoRA (the same with a learned magnitude per output) at those of
:data:`DORA_RANKS`, with the head training fully; full-rank A+B on the same layers (fused
``W = A + B``: ``A`` the loaded weights kept fixed, ``B`` as large as ``W``, starting at zero and
training: weight decay pulls towards the loaded weights, not towards zero), the head training fully;
full fine-tuning; and, for models with BatchNorm, the plain freezing candidates (not the A+B
ones) with BatchNorm kept in eval mode (running statistics, affine parameters still training).
Every candidate is a :class:`~workbench.core.plan.FreezePlan` valid for the model.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from workbench.core.advisor.profile import AdvisorError, ModelProfile, meta_copy
from workbench.core.freezing.reparam.low_rank import layer_kind
from workbench.core.models.tree import ModelTree, is_batchnorm
from workbench.core.models.zoo import find_head
from workbench.core.plan import FreezePlan, Rule
from workbench.core.plan.reparam_spec import ReparamSpec, parse_spec

__all__ = [
    "DORA_RANKS",
    "LOW_RANKS",
    "Candidate",
    "block_sequence",
    "generate_candidates",
    "layer_sequence",
    "low_rank_targets",
    "trainable_names",
]

#: Layer kinds low-rank A+B adapts (see :func:`~workbench.core.freezing.reparam.low_rank.layer_kind`).
_LOW_RANK_KINDS = ("linear", "conv1d_hf", "conv")

#: Ranks of the low-rank A+B candidates (those larger than a target layer allows are left out).
LOW_RANKS = (4, 16, 64)

#: Ranks of the DoRA candidates: one, the middle low rank (DoRA costs a weight-sized product
#: per adapted layer and step, so one rank shows what the learned magnitude buys).
DORA_RANKS = (16,)

#: Full-rank A+B: ``A`` the loaded weights, ``B`` starting at zero. Fused: the layer trains ``W``
#: itself (``B = W - A``, weight decay pulls ``W`` towards ``A``), so a step costs what training
#: those layers costs, plus the fixed copy ``A``; exact mode would add ``A + B`` to every forward.
_FULL_RANK = parse_spec({"kind": "a_plus_b", "a": "current", "b_init": "zeros", "mode": "fused"})

#: A child holding at least this share of its parent's parameters is looked into.
_DOMINANT_SHARE = 0.9
_BN_SELECT = "type:_BatchNorm"


@dataclass(frozen=True)
class Candidate:
    """One candidate plan.

    Attributes:
        name: what it trains, for people (``"last 2 blocks (layer3..layer4) + head"``).
        plan: the freeze plan.
        kind: ``"head"``, ``"last_k"``, ``"top_k"`` (blocks by gradient signal), ``"low_rank"``
            (plain or DoRA: the rule's ``reparam`` says which), ``"full_rank"`` (full-rank A+B)
            or ``"full"``.
        k: blocks trained (0 for head only; all blocks for full fine-tuning and full-rank A+B;
            the rank for low-rank A+B and DoRA).
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


def _layer_list(model: nn.Module, order: dict[str, int]) -> list[str]:
    """The layers of the largest ``ModuleList`` of same-type blocks holding most parameters.

    Transformer stacks keep their layers in one (``bert.encoder.layer``, ``transformer.h``,
    ``model.layers``); empty when the model has none that holds at least half its parameters.
    """
    total = _param_count(model)
    best: tuple[int, list[str]] = (0, [])
    for path, mod in model.named_modules():
        if not isinstance(mod, nn.ModuleList) or len(mod) < 2:
            continue
        kinds = {type(m) for m in mod}
        count = _param_count(mod)
        if len(kinds) == 1 and count * 2 >= total and count > best[0]:
            ran = [f"{path}.{n}" for n, _ in mod.named_children() if f"{path}.{n}" in order]
            best = (count, sorted(ran, key=order.__getitem__))
    return best[1] if len(best[1]) >= 2 else []


def block_sequence(model: nn.Module, profile: ModelProfile) -> list[str]:
    """The model's top-level block sequence (see the module docstring).

    Args:
        model: the model.
        profile: its profile (gives the execution order).

    Returns:
        Dotted module paths of the blocks, in execution order; empty if the model has none.
    """
    order = {p: i for i, p in enumerate(profile.module_order)}
    layers = _layer_list(model, order)
    if layers:
        return layers
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


def layer_sequence(model: nn.Module, profile: ModelProfile, head: Sequence[str] = ()) -> list[str]:
    """The top-level layers of a model with no blocks, in execution order, the head left out.

    A layer is a top-level child that holds parameters and is not a norm layer (a norm trains
    with the layer before it: everything after a layer's start runs after it).

    Args:
        model: the model.
        profile: its profile (gives the execution order).
        head: the head's module paths, left out.

    Returns:
        Dotted paths of the layers; empty when there are fewer than two.
    """
    order = {p: i for i, p in enumerate(profile.module_order)}
    kids = _children_in_order(model, "", order)
    out = [p for p, m in kids if p in order and p not in head and not _is_norm(m)
           and not any(p == h or p.startswith(h + ".") for h in head)]
    return out if len(out) >= 2 else []


def _is_norm(module: nn.Module) -> bool:
    return is_batchnorm(module) or isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1d,
                                                        nn.InstanceNorm2d, nn.InstanceNorm3d))


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
        node = tree[p] if p in tree else None  # noqa: SIM401 - ModelTree is no Mapping
        if node is not None and node.total_params:
            out.append(p)
    return out


def _with_bn_eval(c: Candidate) -> Candidate:
    plan = c.plan.copy()
    plan.rules.append(Rule(_BN_SELECT, bn_eval=True))
    return Candidate(f"{c.name} · BN eval", plan, c.kind, c.k, bn_eval=True)


def _span(blocks: list[str]) -> str:
    return blocks[0] if len(blocks) == 1 else f"{blocks[0]}..{blocks[-1].rpartition('.')[2]}"


def _adapts(module: nn.Module) -> bool:
    """Low-rank A+B can adapt this layer: a linear or convolution layer, and a convolution only
    ungrouped with zero padding (a depthwise convolution's weight has no low-rank product; the
    installer refuses it, so a candidate naming it would stop the whole advice)."""
    kind = layer_kind(module)
    if kind not in _LOW_RANK_KINDS:
        return False
    return kind != "conv" or (getattr(module, "groups", 1) == 1 and getattr(module, "padding_mode", "zeros") == "zeros")


def low_rank_targets(model: nn.Module, blocks: list[str]) -> list[str]:
    """Selectors of the linear and convolution layers in ``blocks`` that low-rank A+B adapts.

    Layers at the same place in every block of one list become one glob
    (``bert.encoder.layer.*.attention.self.query``). The output projection of
    ``nn.MultiheadAttention`` is left out: its weight is read directly, never through the
    layer, so a fused adapter would not run; so are grouped (depthwise) convolutions and those
    padded other than with zeros, which low-rank A+B does not adapt.

    Args:
        model: the model.
        blocks: its block sequence.

    Returns:
        Selectors (globs or paths); empty when the blocks hold no linear layer.
    """
    per_block: list[list[str]] = []
    for b in blocks:
        mod = model.get_submodule(b)
        mha = {f"{n}.out_proj" for n, m in mod.named_modules() if isinstance(m, nn.MultiheadAttention)}
        if _adapts(mod):  # a layer of a model without blocks: itself
            per_block.append([""])
            continue
        per_block.append([n for n, m in mod.named_modules()
                          if n and n not in mha and _adapts(m)])
    if any(rels == [""] for rels in per_block):
        return [f"{b}.{rel}" if rel else b for b, rels in zip(blocks, per_block) for rel in rels]
    parents = {b.rpartition(".")[0] for b in blocks}
    if not (len(parents) == 1 and per_block and all(rel == per_block[0] for rel in per_block)):
        return [f"{b}.{rel}" for b, rels in zip(blocks, per_block) for rel in rels]
    parent = next(iter(parents))
    paths = [p for p, _ in model.named_modules()]
    out = []
    for rel in per_block[0]:
        glob = f"{parent}.*.{rel}" if parent else f"*.{rel}"
        meant = {f"{b}.{rel}" for b in blocks}
        if {p for p in paths if fnmatch.fnmatchcase(p, glob)} == meant:  # '*' also crosses dots
            out.append(glob)
        else:
            out += sorted(meant, key=paths.index)
    return out


def _max_rank(model: nn.Module, blocks: list[str]) -> int:
    """The largest rank every adapted layer allows: a convolution's weight is out x (in x kernel)."""
    dims = []
    for b in blocks:
        for _, m in model.get_submodule(b).named_modules():
            w = getattr(m, "weight", None)
            if _adapts(m) and w is not None:
                dims.append(min(int(w.shape[0]), int(w[0].numel())) if layer_kind(m) == "conv" else min(w.shape))
    return min(dims, default=0)


def _head_modules(model: nn.Module, tree: ModelTree) -> list[str]:
    """The head's modules, plus the owner of any tensor the head shares (a language model's
    output layer tied to the input embedding trains through the embedding)."""
    head = [p for p in find_head(model) if p in tree]
    owner = {id(p): n.rpartition(".")[0] for n, p in model.named_parameters()}
    out = list(head)
    for h in head:
        for p in model.get_submodule(h).parameters():
            o = owner.get(id(p))
            if o is not None and o not in out and not any(o == x or o.startswith(x + ".") for x in out):
                out.append(o)
    return out


def _trains(train: list[str], head: list[str]) -> list[str]:
    return train + [h for h in head if not any(h == t or h.startswith(t + ".") for t in train)]


def generate_candidates(
    model: nn.Module,
    profile: ModelProfile,
    *,
    block_order: Sequence[str] | None = None,
    ranks: Sequence[int] = LOW_RANKS,
    dora_ranks: Sequence[int] = DORA_RANKS,
    full_rank: bool = True,
) -> list[Candidate]:
    """The candidate plans for ``model``, from the least to the most trained.

    Args:
        model: the model.
        profile: its profile.
        block_order: blocks in the order to unfreeze them (most gradient signal first, see
            :mod:`~workbench.core.advisor.grad_signal`); None: the last blocks first.
        ranks: ranks of the low-rank A+B candidates (empty: none).
        dora_ranks: ranks of DoRA candidates (low rank with ``"dora": true``; empty: none).
        full_rank: add full-rank A+B on the layers the low-rank candidates adapt.

    Returns:
        Head only (when a head is found), last k (or top k) blocks for k = 1..n, low-rank
        A+B at each rank, DoRA at each of its ranks, full-rank A+B, full fine-tuning, and
        BatchNorm-eval variants of the plain freezing ones when the model has BatchNorm modules.

    Raises:
        AdvisorError: ``block_order`` is not an ordering of the model's blocks.
    """
    tree = ModelTree.from_model(model)
    head = _head_modules(model, tree)
    blocks = block_sequence(model, profile)
    unit = "block"
    if not blocks:  # no repeated blocks: the last k top-level layers instead
        blocks, unit = layer_sequence(model, profile, head), "layer"
    out: list[Candidate] = []
    if head:
        rules = [Rule("*", frozen=True)] + [Rule(h, frozen=False) for h in head]
        out.append(Candidate("head only", FreezePlan(rules), "head", 0))
    everything = {n for n, _ in model.named_parameters()}
    if block_order is not None and sorted(block_order) != sorted(blocks):
        raise AdvisorError(f"the block order names {', '.join(block_order)}; the model's blocks are {', '.join(blocks)}")
    for k in range(1, len(blocks) + 1):
        if block_order is None:
            last = blocks[-k:]
            after = last[0] if unit == "layer" else last[-1]  # a layer's norm runs after it, before the next layer
            train = _trains(last + [p for p in _after(after, profile, tree) if p not in last], head)
            label = f"last {k} {unit}{'s' if k > 1 else ''} ({_span(last)}) + head"
            kind = "last_k"
        else:
            top = sorted(block_order[:k], key=blocks.index)
            train = _trains(top + [p for p in _after(blocks[-1], profile, tree) if p not in top], head)
            names = ", ".join(b.rpartition(".")[2] for b in top)
            label = f"top {k} block{'s' if k > 1 else ''} by gradient signal ({names}) + head"
            kind = "top_k"
        rules = [Rule("*", frozen=True)] + [Rule(p, frozen=False) for p in train]
        cand = Candidate(label, FreezePlan(rules), kind, k)
        if trainable_names(cand, model, tree) != everything:  # else it is full fine-tuning
            out.append(cand)
    targets = low_rank_targets(model, blocks) if blocks else []
    limit = _max_rank(model, blocks) if targets else 0
    variants = [(r, False) for r in sorted(set(ranks))] + [(r, True) for r in sorted(set(dora_ranks))]
    if targets:
        kinds = {layer_kind(model.get_submodule(m)) for t in targets for m in _matching(model, t)}
        layers = " and ".join(w for w, k in (("linear", {"linear", "conv1d_hf"}), ("conv", {"conv"})) if kinds & k)
        where = f"the {layers} layers of {len(blocks)} {unit}s + head"
    for r, dora in variants:
        if not targets or r > limit:
            continue
        spec = parse_spec({"kind": "a_plus_b", "mode": "fused", "rank": r, "alpha": 2 * r, "dora": dora})
        out.append(Candidate(f"{'DoRA' if dora else 'low-rank A+B'} r={r} on {where}",
                             _adapted(targets, spec, head), "low_rank", r))
    if targets and full_rank:
        out.append(Candidate(f"full-rank A+B on {where}", _adapted(targets, _FULL_RANK, head), "full_rank", len(blocks)))
    out.append(Candidate("full fine-tuning", FreezePlan([Rule("*", frozen=False)]), "full", len(blocks)))
    if any(is_batchnorm(m) for m in model.modules()):
        out += [_with_bn_eval(c) for c in out if c.kind not in ("head", "low_rank", "full_rank")]
    return out


def _adapted(targets: list[str], spec: ReparamSpec, head: list[str]) -> FreezePlan:
    """Everything frozen, A+B (``spec``) on ``targets``, the head training fully."""
    rules = [Rule("*", frozen=True)] + [Rule(t, frozen=False, reparam=spec) for t in targets]
    return FreezePlan(rules + [Rule(h, frozen=False) for h in head])


def _matching(model: nn.Module, selector: str) -> list[str]:
    paths = [p for p, _ in model.named_modules()]
    return [p for p in paths if fnmatch.fnmatchcase(p, selector)] if "*" in selector else [selector]


def trainable_names(candidate: Candidate, model: nn.Module, tree: ModelTree | None = None) -> set[str]:
    """Names of the parameters ``candidate`` trains on ``model``.

    Args:
        candidate: the candidate.
        model: the model it was generated for.
        tree: the model's tree, when the caller has one (building it is most of the cost
            on a large model, and every candidate needs the same one).

    Returns:
        Dotted parameter names (for low-rank A+B: the adapters' ``U`` and ``V``, for full-rank
        A+B the adapted layers' own parameters, and the parameters of the fully trained head,
        named as in the model with the plan applied).
    """
    if candidate.kind in ("low_rank", "full_rank"):
        meta = meta_copy(model)
        candidate.plan.apply(meta)
        return {n for n, p in meta.named_parameters() if p.requires_grad}
    eff = candidate.plan.resolve(tree if tree is not None else model)
    return {n for n, _ in model.named_parameters() if not eff[n.rpartition(".")[0]].frozen}

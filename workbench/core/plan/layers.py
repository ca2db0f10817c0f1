"""Layer indices of a model's parameters, for layer-wise learning-rate decay.

On a timm model the model's own ``group_matcher`` decides, exactly as timm's
``param_groups_layer_decay`` does; elsewhere the repeated blocks of the model (its longest
``ModuleList``/``Sequential``, when that is longer than the list of top-level children) or
else its top-level children, in registration order (the order ``forward`` runs them in for
the usual backbones).
"""

from __future__ import annotations

from torch import nn

__all__ = ["parameter_layers"]


def parameter_layers(model: nn.Module) -> dict[str, int]:
    """The layer index of every parameter: 0 is nearest the input, the largest the head.

    Args:
        model: any model.

    Returns:
        ``{name in model.named_parameters(): layer index}``; the number of layers is the
        largest index + 1.
    """
    names = [n for n, _ in model.named_parameters()]
    if not names:
        return {}
    group_matcher = getattr(model, "group_matcher", None)
    if callable(group_matcher):
        from timm.models import group_parameters  # only timm models have a group_matcher

        layer_map = group_parameters(model, group_matcher(coarse=False), reverse=True)
        last = max(layer_map.values()) if layer_map else 0
        return {n: layer_map.get(n, last) for n in names}
    return _block_layers(model, names)


def _block_layers(model: nn.Module, names: list[str]) -> dict[str, int]:
    top = [n for n, m in model.named_children() if any(True for _ in m.parameters())]
    blocks_path, blocks = "", top
    for path, m in model.named_modules():
        if path and isinstance(m, (nn.ModuleList, nn.Sequential)):
            kids = [n for n, c in m.named_children() if any(True for _ in c.parameters())]
            if len(kids) > len(blocks):
                blocks_path, blocks = path, kids
    prefix = f"{blocks_path}." if blocks_path else ""
    first = 1 if blocks_path else 0  # repeated blocks leave layer 0 to the stem before them
    index = {f"{prefix}{k}": i + first for i, k in enumerate(blocks)}
    out: dict[str, int] = {}
    seen_blocks = False
    for n in names:
        # the block is the segment after the prefix (a child's name holds no dot): one lookup
        head, dot, _rest = n[len(prefix):].partition(".") if n.startswith(prefix) else ("", "", "")
        hit = index.get(f"{prefix}{head}") if dot else None
        if hit is not None:
            seen_blocks = True
            out[n] = hit
        else:  # before the blocks: the stem (0); after them: the head
            out[n] = len(blocks) + first if seen_blocks else 0
    return out

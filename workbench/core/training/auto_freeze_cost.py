"""What freezing each block saves: its share of the model's compute, counted on the first forward.

Auto-freeze weighs a freeze's saving against the learning it stops
(:mod:`workbench.core.training.auto_freeze`). Freezing a block of the front saves its backward
pass (the weight gradients, and the input gradients the blocks before it no longer need) and,
once the frozen-prefix cache serves the steps, its forward pass too. Per layer, backward costs
about twice the forward (one product for the input gradient, one for the weight gradient), so a
block's share of a step's forward plus backward compute is, to that approximation, its share of
the forward pass's multiply-accumulates (MACs).

:class:`BlockCosts` counts those MACs on the model's first forward pass, from the shapes the
layers actually ran with, through forward hooks that it removes after that pass, on every
leaf module and every module with parameters of its own (:func:`module_macs`):

- a convolution: ``output elements x (input channels / groups) x kernel size``;
- a transposed convolution: ``input elements x (output channels / groups) x kernel size``;
- a linear layer: ``output elements x input features``;
- a module with matrices of its own (a recurrent layer's gate weights, an attention's input
  projection): each matrix element once per output position;
- any other leaf (normalisation, activation, embedding lookup): one per output element.

Products computed between modules (the ``q @ k`` of an attention's functional glue) are not
counted; for a model of identical blocks that leaves each block's share the same. Counting
costs a few integer products per module, once.

On CREPE tiny, ``conv1`` and ``conv2`` each hold 46 % of the forward MACs: after those two,
every further freeze saves at most 3 % of a step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["BlockCosts", "counts_macs", "module_macs"]


def counts_macs(module: nn.Module) -> bool:
    """Whether :class:`BlockCosts` counts a module's calls: a leaf, or a module with parameters of its own.

    Args:
        module: the module.

    Returns:
        True for the modules whose :func:`module_macs` make up the model's total.
    """
    return not any(True for _ in module.children()) or any(True for _ in module.parameters(recurse=False))


def module_macs(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """Multiply-accumulates of one call of a module, its own parameters' work only.

    Args:
        module: the module: a leaf (no children), or one that holds parameters of its own
            beside its children (an attention's input projection).
        inputs: its positional inputs.
        output: what it returned.

    Returns:
        The call's MACs by the rules of this module: convolutions and linear layers by their
        formulas; a module with weight matrices of its own (a recurrent layer, an attention's
        input projection; not an embedding or a position table) one product per matrix
        element per output position; any other leaf one
        per output element; a module with children and no matrices of its own 0.
    """
    out = _numel(output)
    weight = getattr(module, "weight", None)
    # one filter's elements from the shape alone: no tensor op runs (the advisor counts inside a dispatch mode)
    per_filter = weight.numel() // weight.shape[0] if isinstance(weight, torch.Tensor) and weight.dim() and weight.shape[0] else 0
    if isinstance(module, nn.modules.conv._ConvTransposeNd) and isinstance(weight, torch.Tensor):
        first = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
        return (first.numel() if first is not None else 0) * per_filter
    if isinstance(module, nn.modules.conv._ConvNd) and isinstance(weight, torch.Tensor):
        return out * per_filter  # (in / groups) x kernel per output element
    if isinstance(module, nn.Linear):
        return out * module.in_features
    matrices = 0 if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) else sum(  # a lookup multiplies nothing
        p.numel() for n, p in module.named_parameters(recurse=False) if p.dim() >= 2 and "weight" in n)
    if matrices:
        first = _first_tensor(output)
        positions = first.numel() // first.shape[-1] if first is not None and first.dim() and first.shape[-1] else 0
        return positions * matrices  # each matrix applied once per position (time step x batch)
    return 0 if any(True for _ in module.children()) else out


def _first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor of a module's output (itself, or the first of a tuple / list)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


def _numel(value: Any) -> int:
    """Elements of the tensors in a module's output (a tensor, or a tuple / list of them)."""
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (tuple, list)):
        return sum(v.numel() for v in value if isinstance(v, torch.Tensor))
    return 0


class BlockCosts:
    """Counts each block's share of the forward MACs on the model's next forward pass.

    Args:
        model: the model.
        blocks: the blocks to price, in execution order.
        front: modules that run before the first block (priced together as the front); any
            other module outside the blocks (a head) counts for the total only.
        counts: MACs per module path already counted on a pass of the same model (the advisor's
            shape-only pass, :attr:`~workbench.core.advisor.profile.ModelProfile.module_macs`):
            priced from them at once, with no hooks; None: counted on the model's next forward.

    Attributes:
        macs: per block, the MACs of its leaves on the counted pass (empty until then).
        front_macs: the MACs of the front's leaves on that pass.
        total: MACs of every leaf of the model on that pass (0 until then).
    """

    def __init__(self, model: nn.Module, blocks: list[str], front: list[str] | None = None,
                 counts: Mapping[str, int] | None = None) -> None:
        self.blocks = list(blocks)
        self.macs: dict[str, int] = {}
        self.front_macs = 0
        self.total = 0
        self._seen: dict[str, int] = {}
        owners = {name: _owner(name, [*self.blocks, *(front or [])]) for name, m in model.named_modules()
                  if counts_macs(m)}
        self._owners = owners
        self._handles: list[Any] = []
        self._done: Any = None
        if counts is not None:
            self._seen = {name: counts[name] for name in owners if counts.get(name)}
            self._finish()
            return
        self._handles = [model.get_submodule(name).register_forward_hook(self._hook(name)) for name in owners]
        self._done = model.register_forward_hook(lambda *_: self._finish())

    def _hook(self, name: str) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        def count(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            self._seen[name] = self._seen.get(name, 0) + module_macs(module, inputs, output)
        return count

    def _finish(self) -> None:
        """After the first full forward (or at the first read, should the model's own hook not run):
        sum per block and remove the hooks."""
        self.close()
        if not self._seen:
            return
        self.total = sum(self._seen.values())
        self.macs = dict.fromkeys(self.blocks, 0)
        for name, n in self._seen.items():
            owner = self._owners.get(name)
            if owner in self.macs:
                self.macs[owner] += n
            elif owner is not None:
                self.front_macs += n
        self._seen = {}

    def close(self) -> None:
        """Remove the hooks (what was counted so far is kept for :meth:`_finish`)."""
        for h in (*self._handles, self._done):
            if h is not None:
                h.remove()
        self._handles, self._done = [], None

    @property
    def known(self) -> bool:
        """The counted pass ran and computed something."""
        if self._seen:
            self._finish()
        return self.total > 0

    def share(self, block: str) -> float:
        """A block's share of the forward MACs (0 until counted).

        Args:
            block: one of ``blocks``.

        Returns:
            Between 0 and 1.
        """
        return self.macs.get(block, 0) / self.total if self.known else 0.0

    def front_share(self) -> float:
        """The front's share of the forward MACs (0 until counted)."""
        return self.front_macs / self.total if self.known else 0.0

    def shares(self) -> dict[str, float]:
        """Every block's share, in block order (empty until counted)."""
        return {b: self.share(b) for b in self.blocks} if self.known else {}


def _owner(name: str, owners: list[str]) -> str | None:
    """The first of ``owners`` a module path lies in (itself or an ancestor), or None."""
    for b in owners:
        if name == b or name.startswith(b + "."):
            return b
    return None


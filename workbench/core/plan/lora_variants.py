"""The LoRA-family variants of low-rank A+B as a table: one row per variant.

Plain LoRA is the default (no flag). Every other variant is a row of :data:`VARIANTS`, and a
rule selects it with its flag: ``"reparam": {"rank": 8, "dora": true}``. The row says what the
plan, the PEFT config reader and writer, the cost counts and the settings dialog need to know;
its class (the weight / output / merge steps, a
:class:`~workbench.core.freezing.reparam.variants.LowRankVariant` subclass with the same
``name``) lives in the freezing layer and registers itself there, so this layer never imports
it.

Adding a variant: write its class (a module of its own under ``core/freezing/reparam/``,
imported by that package's ``__init__``) and add its row here; nothing else names it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT", "VARIANTS", "VariantInfo", "info"]

#: The name of plain LoRA, the variant without a flag.
DEFAULT = "lora"


@dataclass(frozen=True)
class VariantInfo:
    """What the code outside a variant's class knows about it.

    Attributes:
        name: the variant's name and its flag in a ``reparam`` spec (``"dora"``).
        label: short name for the A+B column, plan summaries and the dialog (``"DoRA"``).
        summary: what it adds, in a few words, for messages and the dialog's checkbox.
        tooltip: the settings dialog's tooltip.
        peft_field: the PEFT ``LoraConfig`` switch it maps to (None: no PEFT form).
        extra_per_output: trainable elements it adds per output channel (DoRA's magnitude: 1).
    """

    name: str
    label: str
    summary: str
    tooltip: str
    peft_field: str | None = None
    extra_per_output: int = 0


#: The variants other than plain LoRA, by flag.
VARIANTS: dict[str, VariantInfo] = {
    "dora": VariantInfo(
        "dora", "DoRA", "a trained magnitude per output channel",
        "DoRA (PEFT's use_dora): W = m (A + B) / ||A + B||, m trained; Linear and Conv layers",
        peft_field="use_dora", extra_per_output=1,
    ),
}


def info(name: str) -> VariantInfo | None:
    """The row of variant ``name`` (None for plain LoRA).

    Args:
        name: a variant name (:attr:`~workbench.core.plan.reparam_spec.LowRank.variant`).

    Returns:
        Its row, or None for ``"lora"``.

    Raises:
        KeyError: no such variant.
    """
    return None if name == DEFAULT else VARIANTS[name]

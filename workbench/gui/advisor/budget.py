"""The memory budget a device offers: CUDA total memory, or the RAM available to the CPU."""

from __future__ import annotations

from workbench.core.advisor.activations import device_memory

__all__ = ["device_budget", "format_budget"]


def device_budget(device: str) -> int:
    """Bytes a training run on ``device`` can use, to pre-fill the budget field.

    Args:
        device: the training panel's device value: ``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``.

    Returns:
        What :func:`~workbench.core.advisor.activations.device_memory` says is available: CUDA,
        the device's total memory; MPS, its recommended working set; CPU, the RAM available now.
    """
    return device_memory(device).available


def format_budget(nbytes: int) -> str:
    """A budget as the field shows it: ``"24.0GB"`` or ``"512MB"`` (what ``parse_size`` reads back).

    Args:
        nbytes: bytes.

    Returns:
        The text.
    """
    if nbytes >= 10**9:
        return f"{nbytes / 1e9:.1f}GB"
    return f"{max(1, round(nbytes / 1e6))}MB"

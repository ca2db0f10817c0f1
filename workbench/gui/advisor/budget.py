"""The memory budget a device offers: CUDA total memory, or the RAM available to the CPU."""

from __future__ import annotations

import torch

__all__ = ["device_budget", "format_budget"]


def device_budget(device: str) -> int:
    """Bytes a training run on ``device`` can use, to pre-fill the budget field.

    Args:
        device: the training panel's device value: ``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``.

    Returns:
        CUDA: the device's total memory; otherwise the system's available memory (psutil).
    """
    if device == "auto":
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and torch.cuda.is_available():
        index = int(device.partition(":")[2] or 0)
        return int(torch.cuda.get_device_properties(index).total_memory)
    import psutil

    return int(psutil.virtual_memory().available)


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

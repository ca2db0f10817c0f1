"""What the window asks torch for, and when: the devices it can train on, torchvision's models.

Both need torch (and torchvision) imported. The app builds its window while they are still
importing (:mod:`workbench.gui.startup`), so it calls :func:`defer` first: until
:func:`announce` runs (once they are imported), :func:`is_ready` is False,
:func:`known_devices` is None and the window lists what every machine has (devices ``auto``
and ``cpu``; the start-up model alone in the model bar), then fills in the rest when
:attr:`TorchNotifier.ready` is emitted. Without :func:`defer` (scripts, tests) everything is
ready at once and the first :func:`known_devices` probes.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

__all__ = ["Devices", "TorchNotifier", "announce", "defer", "device_choices", "is_ready", "known_devices", "notifier"]


@dataclass(frozen=True)
class Devices:
    """The accelerators torch sees.

    Attributes:
        cuda: the name of each CUDA (or ROCm) device, in index order.
        mps: whether Apple's MPS backend is available.
    """

    cuda: tuple[str, ...] = ()
    mps: bool = False

    @property
    def accelerator(self) -> bool:
        """Whether there is a GPU to train on."""
        return bool(self.cuda) or self.mps

    @property
    def auto(self) -> str:
        """What the ``auto`` device picks: ``cuda:0``, ``mps`` or ``cpu``."""
        return "cuda:0" if self.cuda else ("mps" if self.mps else "cpu")

    def label(self) -> str:
        """The status bar's device: ``"cuda:0 · NVIDIA H200"``, ``"mps"`` or ``"cpu"``."""
        return f"cuda:0 · {self.cuda[0]}" if self.cuda else self.auto


class TorchNotifier(QObject):
    """Signals:
    ready(): torch and torchvision are imported and the devices known (:func:`announce` ran);
        views fill in what they waited for.
    """

    ready = Signal()


_known: Devices | None = None
_deferred = False
_notifier: TorchNotifier | None = None


def notifier() -> TorchNotifier:
    """The process's one notifier (made on first use, in the GUI thread)."""
    global _notifier
    if _notifier is None:
        _notifier = TorchNotifier()
    return _notifier


def defer() -> None:
    """Wait for :func:`announce` (start-up: the window is built before torch is imported)."""
    global _deferred
    _deferred = True


def is_ready() -> bool:
    """Whether torch and torchvision may be used: nothing deferred it, or :func:`announce` ran."""
    return not _deferred


def announce() -> Devices:
    """Torch and torchvision are imported: probe the devices and emit :attr:`TorchNotifier.ready`.

    Returns:
        The devices.
    """
    devices = _probe()
    notifier().ready.emit()
    return devices


def _probe() -> Devices:
    """Ask torch which devices there are (imports torch) and remember it."""
    global _known, _deferred
    import torch

    mps_backend = getattr(torch.backends, "mps", None)
    cuda = torch.cuda.is_available()
    _known = Devices(
        cuda=tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) if cuda else (),
        mps=mps_backend is not None and mps_backend.is_available(),
    )
    _deferred = False
    return _known


def known_devices() -> Devices | None:
    """The devices, or None while they wait for torch (after :func:`defer`, before :func:`announce`).

    Returns:
        The devices (probed on the first call when nothing deferred them), or None.
    """
    if _deferred:
        return None
    return _known if _known is not None else _probe()


def device_choices() -> list[tuple[str, str]]:
    """Devices training can use here: ``(label, config value)``.

    Returns:
        ``auto`` (naming what it picks), ``cpu``, then ``cuda:N`` for each GPU and ``mps``
        when present; only ``auto`` and ``cpu`` while the probe waits for torch.
    """
    d = known_devices()
    if d is None:
        return [("auto", "auto"), ("cpu", "cpu")]
    out = [(f"auto ({d.auto})", "auto"), ("cpu", "cpu")]
    out += [(f"cuda:{i} · {name}", f"cuda:{i}") for i, name in enumerate(d.cuda)]
    if d.mps:
        out.append(("mps", "mps"))
    return out

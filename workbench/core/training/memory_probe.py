"""Memory probes and byte counters: what the metrics' memory figures measure.

:class:`MemoryProbe` reads a run's memory once per reported step (the figures and their
names are explained in :mod:`workbench.core.training.metrics`); :class:`LiveTensorBytes`
counts the bytes of live tensor storages during a step on the CPU; the counters
(:func:`tensor_bytes`, :func:`grad_bytes`, :func:`optimizer_state_bytes`,
:func:`storage_bytes`, :func:`training_tensors`) size what a run keeps.

Parameter and optimizer-state counters are computed by the engine only when the plan
changes (and once after the next optimizer step, when lazily created optimizer state exists),
never per step.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workbench.core.training.metrics import MEMORY_SOURCES, RSS_GROWTH_SOURCE, TENSOR_STEPS

__all__ = [
    "LiveTensorBytes",
    "MemoryProbe",
    "grad_bytes",
    "optimizer_state_bytes",
    "process_rss",
    "release_freed_heap",
    "storage_bytes",
    "tensor_bytes",
    "tensors_in",
    "training_tensors",
]


# ---------------------------------------------------------------- counters
def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of a tensor's elements.

    Args:
        t: any tensor.

    Returns:
        ``numel * element_size``.
    """
    return t.numel() * t.element_size()


def grad_bytes(params: Iterable[torch.Tensor]) -> int:
    """Bytes of the gradients the given parameters would get (one per element, same dtype).

    Args:
        params: parameters (each counted once, by identity).

    Returns:
        The byte count.
    """
    seen: set[int] = set()
    total = 0
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            total += tensor_bytes(p)
    return total


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes actually held in ``optimizer.state`` (momentum, Adam moments, step counters).

    Args:
        optimizer: any torch optimizer.

    Returns:
        The sum over every state tensor (each storage counted once).
    """
    seen: set[int] = set()
    total = 0
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and id(v) not in seen:
                seen.add(id(v))
                total += tensor_bytes(v)
    return total


def process_rss() -> int | None:
    """The absolute resident set size of this process in bytes, or None where it cannot be read."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:  # no psutil, or a platform without the figure
        return None


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` from the symbols the process already has loaded (no library
    search, no ``ldconfig``), or None where the C library has none (macOS, musl, Windows)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def release_freed_heap() -> None:
    """Hand heap memory this process has freed back to the system (glibc's ``malloc_trim``),
    so the RSS falls to what is in use; a no-op where the C library has no such call.

    A few milliseconds; it does not collect garbage (``gc.collect()`` first for that).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (shared and viewed storages once).

    Args:
        tensors: tensors (parameters, buffers, gradients ...).

    Returns:
        The bytes.
    """
    seen: dict[int, int] = {}
    keep = []
    for t in tensors:
        st = t.untyped_storage()
        keep.append(st)
        seen.setdefault(id(st), st.nbytes())
    return sum(seen.values())


def tensors_in(tree: Any) -> list[torch.Tensor]:
    """The tensors an op's arguments or outputs hold, in order: what ``torch.utils._pytree.tree_flatten``
    leaves as tensor leaves, for the lists, tuples (op results included) and dicts aten ops take and
    return, without building the tree spec a dispatch mode never reads.

    Args:
        tree: a tensor, or lists, tuples and dicts of them and other values, nested.

    Returns:
        The tensors, depth first, dict values in insertion order.
    """
    out: list[torch.Tensor] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, torch.Tensor):
            out.append(node)
        elif isinstance(node, (list, tuple)):
            stack.extend(reversed(node))
        elif isinstance(node, dict):
            stack.extend(reversed(list(node.values())))
    return out


class LiveTensorBytes(TorchDispatchMode):
    """Count the bytes of live tensor storages created while the mode is active.

    Example:
        >>> with LiveTensorBytes(baseline=storage_bytes(model.parameters())) as live:
        ...     loss = model(x).sum(); loss.backward()
        >>> live.peak  # bytes, baseline included

    Args:
        baseline: bytes already live when the mode starts (counted in :attr:`live` and
            :attr:`peak`).
        device_type: count only storages on this device type (``"cpu"``); None: all but meta.
    """

    def __init__(self, baseline: int = 0, device_type: str | None = "cpu") -> None:
        super().__init__()
        self.live = baseline
        self.peak = baseline
        self.device_type = device_type
        self._seen: set[int] = set()

    def _unseen(self, t: torch.Tensor) -> Any:
        """The tensor's storage when it is on the counted device and not counted yet, else None."""
        if self.device_type is not None and t.device.type != self.device_type:
            return None
        st = t.untyped_storage()
        return None if id(st) in self._seen else st

    def _count(self, st: Any) -> None:
        """Count a storage as live until it is freed."""
        key, nbytes = id(st), st.nbytes()
        self._seen.add(key)
        self.live += nbytes
        weakref.finalize(st, self._free, key, nbytes)

    def _free(self, key: int, nbytes: int) -> None:
        if key in self._seen:
            self._seen.discard(key)
            self.live -= nbytes

    def reset_peak(self) -> None:
        """Start a new peak from the bytes live now."""
        self.peak = self.live

    def adopt(self, tensors: Iterable[torch.Tensor]) -> None:
        """Count tensors made before the mode as live until they are freed (a step that frees last
        step's gradients then counts them once, not twice as a fixed ``baseline`` would).

        Args:
            tensors: tensors alive now (weights, buffers, gradients, optimizer state); shared storages once.
        """
        for t in tensors:
            st = self._unseen(t)
            if st is not None:
                self._count(st)
        self.peak = max(self.peak, self.live)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs: set[int] | None = None  # the inputs' storages, read once an output is not known already
        for t in tensors_in(out):
            st = self._unseen(t) if t.device.type != "meta" else None
            if st is None:
                continue
            if inputs is None:
                inputs = {id(a.untyped_storage()) for a in tensors_in((args, kwargs))}
            if id(st) in inputs:  # a view or an in-place result: not new memory
                continue
            self._count(st)
            self.peak = max(self.peak, self.live)
        return out


def training_tensors(model: torch.nn.Module | None, optimizer: torch.optim.Optimizer | None,
                     applied: Any = None) -> list[torch.Tensor]:
    """The tensors a run keeps between steps: weights, buffers, gradients and optimizer state.

    Args:
        model: the model (None: no tensors of its own).
        optimizer: its optimizer, or None.
        applied: the plan applied to the model (an ``AppliedPlan``), or None: the tensors its A+B
            keeps beside the model count too (a fused full-rank ``A``, the buffer exact mode
            writes ``W = A + B`` into).

    Returns:
        The tensors (a storage may appear more than once).
    """
    out: list[torch.Tensor] = []
    for h in applied.installed().values() if applied is not None else ():
        out += [t for _, t in h.fixed()]
        work = getattr(h, "work_buffers", None)  # A+B handles; sub-tensor freezing keeps none
        if work is not None:
            out += work()
    if model is not None:
        out += [*model.parameters(), *model.buffers()]
        out += [p.grad for p in model.parameters() if p.grad is not None]
    if optimizer is not None:
        out += [v for st in optimizer.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    return out


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


class MemoryProbe:
    """Cheap memory readings for one device (a few microseconds per :meth:`sample`).

    On the CPU the peak is the live tensor bytes of the steps run inside :meth:`step` while a
    watch window is open (the first :data:`TENSOR_STEPS` after :meth:`reset` and after each
    :meth:`replan`); allocated is the RSS growth over the baseline, the process RSS when the
    probe was made (the run's setup), and :attr:`peak_rss_growth` its peak (see the module
    docstring). Without ``live`` the CPU peak is that RSS growth.

    Args:
        device: the training device.
        reset_peak: start peak tracking afresh (on CUDA this resets the allocator's peak
            statistics, which other code may be reading: pass False to leave them alone).
        baseline: the CPU baseline RSS in bytes (default: the RSS now); the engine passes
            :func:`process_rss` read when the run's setup began.
        live: the tensors alive between steps (weights, buffers, gradients, optimizer state),
            read when a watched step starts: the bytes its count starts from (CPU).
    """

    def __init__(self, device: torch.device | str, *, reset_peak: bool = True, baseline: int | None = None,
                 live: Callable[[], Iterable[torch.Tensor]] | None = None) -> None:
        self.device = torch.device(device)
        self.kind = self.device.type
        self._live = live if self.kind == "cpu" else None
        self._tensor_peak = 0
        self._window = 0
        self._peak = 0
        self._peak_rss = 0
        self._process: Any = None
        self._statm: int | None = None
        self._closer: weakref.finalize | None = None
        self._page = 0
        #: absolute process RSS when the probe was made (CPU), the baseline of growth.
        self.baseline = 0
        #: the absolute process RSS at the last :meth:`sample` (CPU), or None.
        self.rss: int | None = None
        if self.kind == "cpu":
            try:
                self._statm = os.open("/proc/self/statm", os.O_RDONLY)
                # closed by close(), or when the probe is collected, or at exit (finalize runs
                # before the interpreter tears its modules down)
                self._closer = weakref.finalize(self, _close_quietly, self._statm)
                self._page = os.sysconf("SC_PAGE_SIZE")
                self._read_statm()
            except (OSError, ValueError, IndexError, AttributeError):
                self.close()
                import psutil

                self._process = psutil.Process()
            self.baseline = baseline if baseline is not None else (self._read_rss() or 0)
        if reset_peak:
            self.reset()

    def _read_statm(self) -> int:
        assert self._statm is not None
        return int(os.pread(self._statm, 128, 0).split()[1]) * self._page

    def _read_rss(self) -> int | None:
        if self._statm is not None:
            return self._read_statm()
        if self._process is not None:
            return int(self._process.memory_info().rss)
        return None

    def close(self) -> None:
        """Release the ``/proc/self/statm`` descriptor (also done when garbage-collected)."""
        if self._closer is not None:
            self._closer()
        self._statm = None

    @property
    def source(self) -> str:
        """What the peak measures on this device (``memory_source``; see :data:`MEMORY_SOURCES`)."""
        if self.kind == "cpu" and self._live is None:
            return RSS_GROWTH_SOURCE
        return MEMORY_SOURCES.get(self.kind, MEMORY_SOURCES["cpu"])

    def reset(self) -> None:
        """Start peak tracking afresh (CUDA: reset the allocator's peak statistics; CPU: the
        baseline stays the RSS at the run's setup, and the next steps are watched)."""
        if self.kind == "cuda" and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats(self.device)
        self._peak = 0
        self._peak_rss = 0
        self._tensor_peak = 0
        self._window = TENSOR_STEPS if self._live is not None else 0

    def replan(self) -> None:
        """The plan changed (the step holds other tensors): watch the next steps again (CPU)."""
        if self._live is not None:
            self._window = TENSOR_STEPS

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Run one training step inside: on the CPU, while a watch window is open, its live
        tensor bytes are counted into the peak (elsewhere, and outside a window, nothing happens)."""
        if not self._window or self._live is None:
            yield
            return
        self._window -= 1
        meter = LiveTensorBytes(device_type="cpu")
        meter.adopt(self._live())  # freed during the step (last step's gradients), they stop counting
        with meter:
            yield
        self._tensor_peak = max(self._tensor_peak, meter.peak)

    def sample(self) -> tuple[int | None, int | None, int | None]:
        """Read memory now.

        Returns:
            ``(allocated, peak, reserved)`` in bytes; None where the device has no such figure.
            On the CPU allocated is the RSS growth over :attr:`baseline` and peak :attr:`peak`;
            the absolute RSS is left in :attr:`rss`.
        """
        if self.kind == "cuda":
            return (
                torch.cuda.memory_allocated(self.device),
                torch.cuda.max_memory_allocated(self.device),
                torch.cuda.memory_reserved(self.device),
            )
        if self.kind == "mps":
            cur = int(torch.mps.current_allocated_memory())
            self._peak = max(self._peak, cur)
            driver = getattr(torch.mps, "driver_allocated_memory", None)
            return cur, self._peak, int(driver()) if driver is not None else None
        rss = self._read_rss()
        if rss is None:
            return None, None, None
        self.rss = rss
        self._peak_rss = max(self._peak_rss, rss)
        growth = max(rss - self.baseline, 0)
        self._peak = max(self._peak, growth)
        return growth, self.peak, None

    @property
    def peak(self) -> int | None:
        """The run's peak memory so far (CUDA: the allocator's peak; CPU: the peak tensor bytes of
        the watched steps, or without ``live`` the peak RSS growth)."""
        if self.kind == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        if self.kind == "cpu":
            if self._live is not None:
                return self._tensor_peak or None
            return self.peak_rss_growth
        return self._peak or None

    def summary(self) -> dict[str, Any]:
        """The run summary's memory entries: ``peak_memory_bytes`` (the one peak), ``memory_source``,
        ``peak_rss_bytes`` and ``peak_rss_growth_bytes`` (CPU; None elsewhere)."""
        return {"peak_memory_bytes": self.peak, "memory_source": self.source, "peak_rss_bytes": self.peak_rss,
                "peak_rss_growth_bytes": self.peak_rss_growth}

    @staticmethod
    def no_summary() -> dict[str, Any]:
        """:meth:`summary`'s entries of a run that measured nothing (all None)."""
        return dict.fromkeys(("peak_memory_bytes", "memory_source", "peak_rss_bytes", "peak_rss_growth_bytes"))

    @property
    def peak_rss_growth(self) -> int | None:
        """The largest RSS growth over :attr:`baseline` sampled (CPU), or None."""
        return self._peak if self.kind == "cpu" and self._peak_rss else None

    @property
    def peak_rss(self) -> int | None:
        """The largest absolute process RSS sampled (CPU), or None."""
        return self._peak_rss or None

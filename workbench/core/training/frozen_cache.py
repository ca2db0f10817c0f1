"""The frozen-prefix activation cache: after the first epoch, frozen front layers cost nothing.

When every module that runs before the first trainable module is frozen and deterministic
(eval mode: BatchNorm on running statistics, dropout and drop-path off) and the data gives the
same input for the same sample index, the input of the first trainable part never changes for
a sample. :class:`FrozenPrefixCache` keeps it per sample index while the first epoch runs the
whole model, and from then on runs only the trainable suffix on the kept activations.

How the cut is found (on the first batch, with the global RNG and the buffers restored after):

* one forward records the order of module calls; **F** is the first call whose forward involves
  a trainable tensor, wherever the technique put it: each tensor acts in the modules its plan
  declares (:meth:`~workbench.core.freezing.plan_handle.AppliedPlan.acting_sites`: the module
  holding a plain parameter, the layer a fused adapter hooks; a module never called stands for
  its nearest called ancestor; a technique that declares nothing keeps the cache off); the **cut** is the outermost module **C** on F's call chain that F is
  the first call of (``layer3`` when ``layer3.0.conv1`` trains, ``encoder.layer.10`` when a
  BERT layer trains, ``fc`` for a head only). Its input (the first argument) is what is kept.
* the **skipped** modules are the outermost ones called before C that are not its callers;
  on a cached step each returns a zero placeholder of the shape it returned (no compute) and
  C's input is replaced by the kept rows.
* checks (each refusal is one line naming the module): nothing skipped is in train mode with
  BatchNorm statistics or dropout, nothing skipped is called after C, C runs once, the frozen
  part gives the same C input twice, and the cached path gives the same output as the whole
  model on that batch (a skip connection around the cut would not), and its autograd graph
  reaches every trainable tensor the whole model's graph reaches (equal outputs do not prove
  that: an adapter whose B starts at zero changes nothing yet).

The sample index comes from the loader's batch sampler (:func:`index_recording_loader`), in
order, so worker processes and prefetching are fine. A batch the cache will serve is fetched
as labels only, its inputs never loaded (:mod:`~workbench.core.training.cache_inputs`).

Across plan changes and epochs:

* a batch with some rows kept runs the prefix for the missing samples only (stopped at the
  cut), then the suffix on all its rows (:mod:`~workbench.core.training.cache_cut`);
* a change that only freezes more (auto-freeze's decisions, stages) **advances** the rows:
  the next step finds the new cut, checks on its batch that the old cut's input run through
  the newly frozen modules gives the new cut's input, carries every kept row through them and
  frees the old rows;
* a change that makes any part of the prefix trainable again (or takes a module out of eval
  mode, or re-installs an extension) drops the rows at once and finds a new cut at the next step.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from workbench.core.errors import WorkbenchError
from workbench.core.training.batches import batch_size_of
from workbench.core.training.cache_cut import (
    Cut,
    Placeholders,
    SpecError,
    batch_part,
    out_spec,
    reached_params,
    rows_until,
    run_from,
    same_output,
)
from workbench.core.training.cache_inputs import reads_labels_alone, unwrap_subsets
from workbench.core.training.cache_loader import IndexQueue, index_recording_loader
from workbench.core.training.cache_store import SPILL_NAME, SPILL_NAME_2, RowStore
from workbench.core.training.config import CACHE_MODES

__all__ = [
    "CACHE_MODES",
    "cache_line",
    "CacheRefusedError",
    "CacheStats",
    "FrozenPrefixCache",
    "IndexQueue",
    "data_determinism",
    "index_recording_loader",
    "owner_sites",
    "static_refusal",
]


_DETERMINISTIC_TRANSFORMS = frozenset({
    "Compose", "Resize", "CenterCrop", "ToTensor", "PILToTensor", "Normalize", "ConvertImageDtype",
    "ImageClassification", "Grayscale", "ToImage", "ToDtype", "Identity",
})


class CacheRefusedError(WorkbenchError):
    """The cache cannot be exact here; the message is one line saying why (and which module).

    Args:
        message: the line.
        quiet: nothing is frozen at the front (yet): nothing to say in the run's events.
    """

    def __init__(self, message: str, *, quiet: bool = False) -> None:
        super().__init__(message)
        self.quiet = quiet


@dataclass
class CacheStats:
    """What the cache holds and how often it served.

    Attributes:
        cut: the module whose input is kept, or None before the first step / when off.
        rows: samples held.
        bytes_memory: bytes held in memory.
        bytes_disk: bytes held in the spill file.
        hits: steps served from the cache.
        misses: steps that ran the whole model.
        invalidations: times a plan change dropped the cache.
        inputs_skipped: served batches whose inputs were never loaded (their labels only:
            :mod:`~workbench.core.training.cache_inputs`).
        reloads: such batches the cache could not serve after all (a plan change dropped it
            after they were fetched): their inputs were loaded then.
        partial: steps with some rows kept: the prefix ran for the other samples only.
        advances: freezes that carried the kept rows to a later cut instead of dropping them.
    """

    cut: str | None = None
    rows: int = 0
    bytes_memory: int = 0
    bytes_disk: int = 0
    hits: int = 0
    misses: int = 0
    invalidations: int = 0
    inputs_skipped: int = 0
    reloads: int = 0
    partial: int = 0
    advances: int = 0

    @property
    def hit_rate(self) -> float | None:
        """Share of steps served wholly from the cache (None before any step)."""
        n = self.hits + self.partial + self.misses
        return self.hits / n if n else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, the hit rate included."""
        return {
            "cut": self.cut, "rows": self.rows, "bytes_memory": self.bytes_memory, "bytes_disk": self.bytes_disk,
            "hits": self.hits, "misses": self.misses, "hit_rate": self.hit_rate, "invalidations": self.invalidations,
            "inputs_skipped": self.inputs_skipped, "reloads": self.reloads, "partial": self.partial,
            "advances": self.advances,
        }


def cache_line(stats: Mapping[str, Any]) -> str:
    """A run's frozen-prefix cache in one line, as the CLI summary and the app's Runs tab show it.

    Args:
        stats: :meth:`CacheStats.to_dict` of a run (read back from a run's JSON: a value of
            the wrong type counts as 0).

    Returns:
        ``input of 'fc', 32 samples, 66 kB in memory + 0 B on disk, hit rate 67% (8 of 12
        steps), inputs of 8 steps not loaded`` (the last part only when some were not).
    """
    from workbench.core.formatting import fmt_bytes

    def num(key: str) -> int:
        v = stats.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0

    rate = stats.get("hit_rate")
    rate_text = f"{rate:.0%}" if isinstance(rate, (int, float)) and not isinstance(rate, bool) else "–"
    line = (f"input of '{stats.get('cut')}', {num('rows')} samples, {fmt_bytes(num('bytes_memory'))} in memory + "
            f"{fmt_bytes(num('bytes_disk'))} on disk, hit rate {rate_text} ({num('hits')} of "
            f"{num('hits') + num('partial') + num('misses')} steps)")
    if num("partial"):
        line += f", {num('partial')} partly (the prefix ran for the missing samples only)"
    if num("advances"):
        line += ", carried to a later cut " + ("once" if num("advances") == 1 else f"{num('advances')} times")
    if num("inputs_skipped"):
        line += f", inputs of {num('inputs_skipped')} steps not loaded"
    if num("reloads"):
        line += f", {num('reloads')} loaded late after a plan change"
    return line


# ---------------------------------------------------------------- static checks
def _transform_ok(t: Any) -> bool:
    if t is None:
        return True
    name = type(t).__name__
    if name == "Compose":
        return all(_transform_ok(x) for x in getattr(t, "transforms", [None]))
    return name in _DETERMINISTIC_TRANSFORMS


def data_determinism(dataset: Dataset[Any]) -> str | None:
    """Why the data may not give the same input for the same sample index, or None when it does.

    Args:
        dataset: the training dataset (subsets are looked through).

    Returns:
        None for data known to be deterministic (the built-in synthetic and text datasets,
        image files with resize/crop/normalize transforms only), else one line.
    """
    from workbench.core.training.data import SyntheticImageDataset, SyntheticTextDataset
    from workbench.core.training.text_jsonl import JsonlTextDataset

    ds = unwrap_subsets(dataset)
    if isinstance(ds, (SyntheticTextDataset, JsonlTextDataset)) or getattr(ds, "deterministic", False) is True:
        return None  # (a py: dataset of tensors says so itself: UserDataset.deterministic)
    if isinstance(ds, SyntheticImageDataset):
        t = getattr(ds, "transform", None)
        return None if _transform_ok(t) else f"its transform {type(t).__name__} may be random"
    transform = getattr(ds, "transform", "missing")
    if transform == "missing":
        return f"the dataset {type(ds).__name__} is not known to give the same input for the same sample"
    if not _transform_ok(transform):
        return f"the data's transform {type(transform).__name__} may be random (augmentation)"
    if getattr(ds, "target_transform", None) is not None:
        return "the data has a target transform that may be random"
    return None


def static_refusal(config: Any, applied: Any, dataset: Dataset[Any], *, distributed: bool) -> tuple[str | None, bool]:
    """Why the cache cannot be used for this run, decided before the first step.

    Args:
        config: the :class:`~workbench.core.training.config.TrainConfig`.
        applied: the run's :class:`~workbench.core.freezing.apply.AppliedPlan`.
        dataset: the training dataset.
        distributed: the run is under torchrun.

    Returns:
        ``(reason, data_only)``: one line or None, and whether the only reason is that the
        data is not known to be deterministic (``cache_frozen="on"`` vouches for it).
    """
    if distributed:
        return "not under torchrun (each rank would need its own cache)", False
    if config.compile_backend:
        return "not with --compile (the cut changes the model's graph)", False
    if applied is not None and applied.installed("checkpoint"):
        return "not with activation checkpointing (its recompute would run the cut twice)", False
    try:
        n = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        return "the dataset has no length (the cache is indexed by sample)", False
    if n < 1:
        return "the dataset is empty", False
    why = data_determinism(dataset)
    if why is not None:
        return f"{why}; pass --cache-frozen on if it gives the same input for the same sample", True
    return None, False


# ---------------------------------------------------------------- model analysis
@dataclass
class _Call:
    path: str
    module: nn.Module
    parent: int | None
    first_child: int | None = None
    lone: bool = False  # called with one positional argument and no keywords


def _stochastic(m: nn.Module) -> bool:
    """A module whose output or buffers depend on being in train mode."""
    if not m.training:
        return False
    if isinstance(m, nn.modules.batchnorm._BatchNorm) or (
        isinstance(getattr(m, "running_mean", None), torch.Tensor) and getattr(m, "track_running_stats", True)
    ):
        return True
    name = type(m).__name__.lower()
    if isinstance(m, nn.modules.dropout._DropoutNd) or "drop" in name or "stochastic" in name:
        p = getattr(m, "p", getattr(m, "drop_prob", getattr(m, "drop_rate", 0.0)))
        return not isinstance(p, (int, float)) or p > 0
    return False


def _first_tensor(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[str | int, torch.Tensor] | None:
    if args and isinstance(args[0], torch.Tensor):
        return 0, args[0]
    if not args:
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                return k, v
    return None


@contextlib.contextmanager
def _kept_state(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Run extra forwards without a trace: the global RNG and every buffer are restored after."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        try:
            yield
        finally:
            for b, v in saved:
                b.data.copy_(v)


class FrozenPrefixCache:
    """Wraps a run's forward: the first epoch fills the cache, later steps run the suffix only.

    Args:
        model: the model (the plan already applied).
        forward: what runs a batch (the model, or its wrapper).
        queue: the loader's sample indices (:func:`index_recording_loader`).
        n_samples: samples in the training dataset.
        device: the training device.
        budget: bytes of memory the rows may use (beyond it: the spill file).
        spill_dir: folder of the spill file, or None (rows beyond the budget stay uncached).
        atol: tolerance of the first-batch check that the cut is clean.
        sites: ``sites() -> {tensor name: [module paths] or None}``, where each trainable
            tensor acts (:meth:`~workbench.core.freezing.plan_handle.AppliedPlan.acting_sites`);
            None: each parameter acts in the module that holds it (:func:`owner_sites`).

    Attributes:
        stats: :class:`CacheStats`.
        refused: one line when the cache turned itself off (no clean cut ...), else None.
    """

    def __init__(
        self, model: nn.Module, forward: Callable[..., Any], queue: IndexQueue, n_samples: int,
        device: torch.device, budget: int, spill_dir: Path | None, *, atol: float = 1e-4,
        sites: Callable[[], Mapping[str, list[str] | None]] | None = None,
    ) -> None:
        self.model = model
        self.sites = sites
        self.forward = forward
        self.queue = queue
        self.n = n_samples
        self.device = device
        self.budget = budget
        self.spill_dir = spill_dir
        self.atol = atol
        self.stats = CacheStats()
        self.refused: str | None = None
        self._cut: Cut | None = None
        self._store: RowStore | None = None
        self._events: list[str] = []
        self._zeros = Placeholders()
        #: the cut and rows before a freeze, until the next step carries them to the new cut
        self._pending: tuple[Cut, RowStore] | None = None
        #: the calls and their inputs of the last trace (:meth:`_find_cut`), for :meth:`_advance`
        self._trace: tuple[list[_Call], list[Any]] | None = None
        self._spill_n = 0
        self._tmp: Path | None = None
        self._signature: tuple[tuple[bool, ...], tuple[bool, ...], tuple[int, ...]] | None = None
        self._full_reach: set[int] | None = None  # trainable tensors the whole model's graph reaches
        #: the training dataset and its loader's collate function, when batches the cache
        #: serves load their labels only (:meth:`label_only_batches`); None otherwise
        self.dataset: Dataset[Any] | None = None
        self.collate: Callable[[list[Any]], Any] | None = None

    def label_only_batches(self, dataset: Dataset[Any], collate: Callable[[list[Any]], Any]) -> None:
        """Let the loader fetch the batches this cache will serve as labels only.

        Args:
            dataset: the training dataset (its real inputs, for a batch the cache cannot
                serve after all).
            collate: the loader's collate function.
        """
        self.dataset, self.collate = dataset, collate
        self.queue.serves = self.serves

    # ------------------------------------------------------------ engine hooks
    def take_events(self) -> list[str]:
        """Lines for the run's event stream since the last call (cut found, refused, dropped)."""
        ev, self._events = self._events, []
        return ev

    def _state_signature(self) -> tuple[tuple[bool, ...], tuple[bool, ...], tuple[int, ...]]:
        return (tuple(p.requires_grad for p in self.model.parameters()), tuple(m.training for m in self.model.modules()),
                tuple(id(p) for p in self.model.parameters()))

    def _only_froze(self) -> bool:
        """Since the cut was found, the plan only froze (or locked in eval mode): nothing that
        was frozen trains now, no module left eval mode, no parameter was replaced."""
        if self._signature is None:
            return False
        grads, modes, ids = self._signature
        grads2, modes2, ids2 = self._state_signature()
        return (ids == ids2 and len(modes) == len(modes2) and all(a or not b for a, b in zip(grads, grads2))
                and all(a or not b for a, b in zip(modes, modes2)))

    def plan_changed(self) -> None:
        """A plan change took effect: keep, advance or drop the rows.

        A change that only froze more keeps the rows until the next step: they are the inputs
        of the newly frozen modules, so they are carried through them to the new cut then
        (:meth:`_advance`). Any other change (something before the cut trains again, a module
        left eval mode, an extension was re-installed) drops them at once, and a new cut is
        found at the next step.
        """
        if self._cut is not None and self._state_signature() == self._signature:
            return
        had = self._cut is not None
        if had and self._only_froze() and self._store is not None:
            assert self._cut is not None
            self._pending, self._store, self._cut = (self._cut, self._store), None, None
            self.refused = None
            return
        self._drop()
        self.refused = None
        if had:
            self.stats.invalidations += 1
            self._events.append("frozen-prefix cache dropped: the plan changed what trains; a new cut is found at the next step")

    def close(self) -> None:
        """Free the rows and remove the spill file."""
        self._drop()

    def serves(self, idx: list[int]) -> bool:
        """Whether the next step would serve a batch of these samples from kept rows (so the
        batch need not load its inputs)."""
        return self.refused is None and self._store is not None and self._store.has_all(torch.tensor(idx, dtype=torch.long))

    def _reload(self, idx: list[int], placeholder: torch.Tensor) -> torch.Tensor:
        """The real inputs of a batch fetched as labels only, placed as its placeholder is."""
        assert self.collate is not None and self.dataset is not None
        x = self.collate([self.dataset[i] for i in idx])[0]
        return torch.empty_like(placeholder).copy_(x)  # its device, dtype and memory format

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run one training batch (called as the model would be)."""
        entry = self.queue.pop()
        idx_list, label_only = entry if entry is not None else (None, False)
        if label_only:
            assert idx_list is not None
            if self._cut is not None and self.serves(idx_list):
                self.stats.inputs_skipped += 1
            else:  # a plan change dropped (or moved) the rows after the batch was fetched: its inputs now
                args = (self._reload(idx_list, args[0]), *args[1:])
                self.stats.reloads += 1
        if self.refused is not None or idx_list is None:
            self._drop_pending()
            return self.forward(*args, **kwargs)
        idx = torch.tensor(idx_list, dtype=torch.long)
        if self._cut is None:
            try:
                self._cut = self._find_cut(args, kwargs)
            except CacheRefusedError as e:
                self._drop_pending()
                self.refused = str(e)
                if not e.quiet:
                    self._events.append(f"frozen-prefix cache off: {e}")
                return self.forward(*args, **kwargs)
            finally:
                trace, self._trace = self._trace, None
            self._zeros.clear()
            self.stats.cut = self._cut.path
            self._signature = self._state_signature()
            self._store = self._advance(self._cut, trace, args, kwargs)
            if self._store is None:
                self._store = self._new_store(self._cut)
        store = self._store
        assert store is not None
        held = store.held(idx)
        if bool(held.all()):
            self.stats.hits += 1
            return self._run_cut(self._cut, store.get(idx), args, kwargs)
        if not bool(held.any()):
            self.stats.misses += 1
            return self._run_capture(self._cut, store, idx, args, kwargs)
        self.stats.partial += 1
        return self._run_partial(self._cut, store, idx, held, args, kwargs)

    def _new_store(self, cut: Cut) -> RowStore:
        """An empty store for a cut's rows (the spill file named apart from a store still open)."""
        self._spill_n += 1
        store = RowStore(self.n, cut.row_shape, cut.dtype, self.device, self.budget, self._spill_folder(),
                         name=SPILL_NAME if self._spill_n % 2 else SPILL_NAME_2)
        if store.note:
            self._events.append(f"frozen-prefix cache: {store.note}")
        return store

    def _drop_pending(self) -> None:
        if self._pending is not None:
            self._pending[1].close()
            self._pending = None
            self.stats.invalidations += 1
            self._events.append("frozen-prefix cache dropped: the rows could not be carried to a new cut")

    def _advance(self, cut: Cut, trace: tuple[list[_Call], list[Any]] | None, args: Any, kwargs: Any) -> RowStore | None:
        """Carry the rows kept before a freeze to the new cut, then free them.

        The rows at the old cut are the inputs of the modules the freeze added to the prefix:
        run through them (and nothing after the new cut), they are the new cut's inputs, as a
        whole-model forward would give. Checked first on this batch: the old cut's input, run
        so, must give the new cut's input the trace recorded. The rows move in batches of this
        batch's size (the batch's other arguments sliced to match); the old store is closed
        right after.

        Returns:
            The new store, or None when there was nothing to carry (or it could not be).
        """
        if self._pending is None:
            return None
        old, old_store = self._pending
        self._pending = None
        if old.module is cut.module and old.key == cut.key and old.row_shape == cut.row_shape and old.dtype == cut.dtype:
            return old_store  # the freeze did not reach the cut: the rows stand as they are
        why = self._advance_check(old, cut, trace, args, kwargs)
        if why is not None:
            old_store.close()
            self.stats.invalidations += 1
            self._events.append(f"frozen-prefix cache dropped: {why}; it fills again at '{cut.path}'")
            return None
        store = self._new_store(cut)
        held = old_store.filled.nonzero().flatten()
        batch = batch_size_of(args[0] if args else next(iter(kwargs.values()), None))
        step = max(1, batch)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            for lo in range(0, held.numel(), step):
                chunk = held[lo : lo + step]
                pos = torch.arange(chunk.numel())
                a, kw = (batch_part(args, pos, batch), batch_part(kwargs, pos, batch)) if chunk.numel() < batch else (args, kwargs)
                rows = rows_until(cut.module, cut.key, self.forward, a, kw, start=(old, old_store.get(chunk), self._zeros))
                if rows is None or rows.shape[0] != chunk.numel():
                    break
                store.put(chunk, rows)
        old_store.close()
        self._zeros.clear()
        self.stats.advances += 1
        self._events.append(f"frozen-prefix cache advanced from '{old.path}' to '{cut.path}': "
                            f"{store.count} kept rows carried through the newly frozen modules")
        return store

    def _advance_check(self, old: Cut, cut: Cut, trace: tuple[list[_Call], list[Any]] | None, args: Any,
                       kwargs: Any) -> str | None:
        """Why the rows at ``old`` cannot be carried to ``cut``, or None."""
        if trace is None:
            return "the new cut was not traced"
        calls, inputs = trace
        at = [i for i, c in enumerate(calls) if c.module is old.module]
        new_at = next((i for i, c in enumerate(calls) if c.module is cut.module), None)
        if len(at) != 1 or new_at is None or at[0] >= new_at or inputs[at[0]] is None or inputs[new_at] is None:
            return f"'{cut.path}' does not run after '{old.path}'"
        x_old, x_new = inputs[at[0]][1], inputs[new_at][1]
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            got = rows_until(cut.module, cut.key, self.forward, args, kwargs, start=(old, x_old, self._zeros))
        if got is None or not same_output(got, x_new, self.atol):
            return f"the input of '{cut.path}' depends on more than the input of '{old.path}'"
        return None

    def _run_partial(self, cut: Cut, store: RowStore, idx: torch.Tensor, held: torch.Tensor, args: Any,
                     kwargs: Any) -> Any:
        """A batch some of whose rows are kept: the prefix runs for the missing samples only."""
        batch = idx.numel()
        miss = (~held).nonzero().flatten()
        new = rows_until(cut.module, cut.key, self.forward, batch_part(args, miss, batch), batch_part(kwargs, miss, batch))
        if new is None or new.shape[0] != miss.numel() or tuple(new.shape[1:]) != cut.row_shape:
            self.stats.partial -= 1
            self.stats.misses += 1
            return self._run_capture(cut, store, idx, args, kwargs)
        store.put(idx[miss], new)
        rows = torch.empty((batch, *cut.row_shape), dtype=cut.dtype, device=new.device)
        have = held.nonzero().flatten()
        rows[have.to(rows.device)] = store.get(idx[have]).to(rows.device)
        rows[miss.to(rows.device)] = new.to(cut.dtype)
        return self._run_cut(cut, rows, args, kwargs)

    def _spill_folder(self) -> Path | None:
        """The run folder, or a private temporary folder when the run saves nothing."""
        if self.spill_dir is not None:
            return self.spill_dir
        if self._tmp is None:
            try:
                self._tmp = Path(tempfile.mkdtemp(prefix="workbench-cache-"))
            except OSError:
                return None
        return self._tmp

    def _refresh(self) -> None:
        st = self._store
        if st is not None:
            self.stats.rows, self.stats.bytes_memory, self.stats.bytes_disk = st.count, st.bytes_memory, st.bytes_disk

    def _drop(self) -> None:
        self._refresh()
        if self._pending is not None:
            self._pending[1].close()
            self._pending = None
        if self._store is not None:
            self._store.close()
        self._store = None
        self._cut = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # ------------------------------------------------------------ running
    def _run_capture(self, cut: Cut, store: RowStore, idx: torch.Tensor, args: Any, kwargs: Any) -> Any:
        kept: list[torch.Tensor] = []

        def pre(_m: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
            t = a[cut.key] if isinstance(cut.key, int) else kw.get(cut.key)
            if isinstance(t, torch.Tensor):
                kept.append(t.detach())

        h = cut.module.register_forward_pre_hook(pre, with_kwargs=True)
        try:
            out = self.forward(*args, **kwargs)
        finally:
            h.remove()
        if len(kept) == 1 and kept[0].shape[0] == idx.numel():
            store.put(idx, kept[0])
        return out

    def _run_cut(self, cut: Cut, rows: torch.Tensor, args: Any, kwargs: Any) -> Any:
        return run_from(cut, rows, self.forward, args, kwargs, self._zeros)

    # ------------------------------------------------------------ finding the cut
    def _record(self, args: Any, kwargs: Any) -> tuple[list[_Call], list[Any], dict[int, Any], Any]:
        """One forward recording module calls, their inputs and outputs."""
        calls: list[_Call] = []
        inputs: list[Any] = []
        outputs: dict[int, Any] = {}
        stack: list[int] = []
        paths = {id(m): p for p, m in self.model.named_modules(remove_duplicate=False)}
        handles = []

        def pre(m: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
            parent = stack[-1] if stack else None
            i = len(calls)
            calls.append(_Call(paths.get(id(m), "?"), m, parent, lone=len(a) == 1 and not kw))
            if parent is not None and calls[parent].first_child is None:
                calls[parent].first_child = i
            inputs.append(_first_tensor(a, kw))
            stack.append(i)

        def post(m: nn.Module, _a: Any, _kw: Any, out: Any) -> None:
            i = stack.pop()
            outputs[i] = out

        for m in self.model.modules():
            handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(m.register_forward_hook(post, with_kwargs=True))
        try:
            out = self.forward(*args, **kwargs)
        finally:
            for h in handles:
                h.remove()
        return calls, inputs, outputs, out

    def _find_cut(self, args: Any, kwargs: Any) -> Cut:
        self._full_reach = None
        rng = (torch.get_rng_state(), torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None)
        with _kept_state(self.model, self.device):
            try:
                calls, inputs, outputs, ref = self._record(args, kwargs)
                self._trace = (calls, inputs)
            except CacheRefusedError:
                raise
            except Exception as e:
                raise CacheRefusedError(f"the model could not be traced ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})") from None
            return self._cut_from(calls, inputs, outputs, ref, args, kwargs, rng)

    def _cut_from(
        self, calls: list[_Call], inputs: list[Any], outputs: dict[int, Any], ref: Any, args: Any, kwargs: Any,
        rng: tuple[torch.Tensor, torch.Tensor | None],
    ) -> Cut:
        if not calls:
            raise CacheRefusedError("the model ran no modules")
        f = self._first_acting(calls)
        c = f
        while True:
            p = calls[c].parent
            if p is None or calls[p].parent is None or calls[p].first_child != c:
                break
            c = p
        # the cut F is the first call of, else an outer one (what runs in it before F then runs each step)
        candidates = [c]
        p = calls[c].parent
        while p is not None and calls[p].parent is not None:
            candidates.append(p)
            p = calls[p].parent
        first: CacheRefusedError | None = None
        for cand in candidates:
            try:
                return self._try_cut(cand, calls, inputs, outputs, ref, args, kwargs, rng)
            except CacheRefusedError as e:
                first = first or e
        assert first is not None
        raise first

    def _first_acting(self, calls: list[_Call]) -> int:
        """The first call whose forward involves a trainable tensor, however it is installed.

        Each trainable tensor acts where its plan says (:meth:`AppliedPlan.acting_sites`: the
        module holding a plain parameter, the module an extension declares); a module that
        never runs as a call (a fused adapter's child) stands for its nearest called ancestor,
        whose forward must then be what uses it.
        """
        sites = self.sites() if self.sites is not None else owner_sites(self.model)
        first_call: dict[str, int] = {}
        for i, call in enumerate(calls):
            first_call.setdefault(call.path, i)
        best: tuple[int, str, str] | None = None
        for name, paths in sites.items():
            if paths is None:
                raise CacheRefusedError(
                    f"'{name}' trains through a technique that does not say which modules use it "
                    "(its handle has no acts_in); the cut cannot be placed safely"
                )
            for path in paths:
                q = path
                while q not in first_call and q:
                    q = q.rpartition(".")[0]
                at = first_call.get(q)
                if at is None:
                    raise CacheRefusedError(f"'{name}' trains in '{path}', and nothing that holds it runs as a module")
                if best is None or at < best[0]:
                    best = (at, name, path)
        if best is None:
            raise CacheRefusedError("no module that trains was called", quiet=True)
        f, name, path = best
        if calls[f].parent is None:
            if path == calls[f].path:
                raise CacheRefusedError(
                    f"the model's root trains parameters of its own ({name}); nothing runs before it", quiet=True)
            raise CacheRefusedError(
                f"'{name}' trains in '{path}', which never runs as a module: only the model's root uses it, "
                "so nothing can run before it")
        return f

    def _try_cut(
        self, c: int, calls: list[_Call], inputs: list[Any], outputs: dict[int, Any], ref: Any, args: Any,
        kwargs: Any, rng: tuple[torch.Tensor, torch.Tensor | None],
    ) -> Cut:
        cut = calls[c]
        name = cut.path or "(root)"
        if c == 0 or calls[c].parent is None:
            raise CacheRefusedError(f"nothing frozen runs before '{name}'", quiet=True)
        chain: set[int] = set()
        a: int | None = c
        while a is not None:
            chain.add(a)
            a = calls[a].parent
        skipped: list[int] = [i for i in range(c) if i not in chain and calls[i].parent in chain]
        if not skipped:
            raise CacheRefusedError(f"nothing frozen runs before '{name}'", quiet=True)
        skipped_ids = {id(calls[i].module) for i in skipped}
        inside: set[int] = set()
        for i in range(c):
            j: int | None = i
            while j is not None and j not in chain:
                if j in skipped:
                    inside.add(i)
                    break
                j = calls[j].parent
        for i in sorted(inside):
            m = calls[i].module
            if _stochastic(m):
                raise CacheRefusedError(
                    f"'{calls[i].path}' runs before the first trainable module in train mode "
                    f"({type(m).__name__}); lock the frozen part in eval mode (plan key eval or bn_eval)"
                )
        for i in range(c + 1, len(calls)):
            if id(calls[i].module) in skipped_ids:
                raise CacheRefusedError(f"no clean cut at '{name}': '{calls[i].path}' runs both before and after it")
            if calls[i].module is cut.module:
                raise CacheRefusedError(f"no clean cut at '{name}': it runs more than once per forward")
        kept = inputs[c]
        if kept is None:
            raise CacheRefusedError(f"no clean cut at '{name}': its input is not a tensor")
        key, x = kept
        batch = x.shape[0] if x.dim() else 0
        try:
            specs = [(calls[i].path, calls[i].module, out_spec(outputs.get(i), batch)) for i in skipped]
        except SpecError as e:
            raise CacheRefusedError(f"no clean cut at '{name}': a module before it: {e}") from None
        direct = cut.lone and key == 0 and outputs.get(c) is ref  # the model returns what the cut returns
        cut_obj = Cut(name, cut.module, key, specs, tuple(x.shape[1:]), x.dtype, direct)
        # the frozen part gives the same input again (no hidden randomness)
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(torch.initial_seed() + 1)
            calls2, inputs2, _, _ = self._record(args, kwargs)
        again = inputs2[c] if len(calls2) == len(calls) else None
        if again is None or not same_output(again[1], x, 1e-6):
            raise CacheRefusedError(
                f"the frozen part before '{name}' gives a different output for the same batch "
                "(dropout or drop-path in train mode?); lock it in eval mode (plan key eval)"
            )
        # the suffix alone on the kept input gives the model's output (a clean cut)
        rng_state, cuda_state = rng
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.set_rng_state(rng_state)
            if cuda_state is not None:
                torch.cuda.set_rng_state(cuda_state, self.device)
            try:
                got = self._run_cut(cut_obj, x.detach().clone(), args, kwargs)
            except Exception as e:
                raise CacheRefusedError(
                    f"no clean cut at '{name}': the model's forward uses what runs before it "
                    f"({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})"
                ) from None
        if not same_output(ref, got, self.atol):
            raise CacheRefusedError(
                f"no clean cut at '{name}': the model uses values from before it besides its input "
                "(a skip connection around it?)"
            )
        self._check_reach(cut_obj, x, args, kwargs)
        return cut_obj

    def _check_reach(self, cut: Cut, x: torch.Tensor, args: Any, kwargs: Any) -> None:
        """The suffix alone reaches every trainable tensor the whole model reaches.

        Equal outputs do not prove it: an adapter whose B starts at zero changes nothing yet.
        A trainable tensor that acts before the cut (whatever installed it, declared or not)
        would be cut out of the graph of every cached step, and silently stop training.
        """
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            if self._full_reach is None:
                self._full_reach = reached_params(self.forward(*args, **kwargs))
            part = reached_params(self._run_cut(cut, x.detach().clone(), args, kwargs))
        lost = self._full_reach - part
        if lost:
            names = [n for n, p in self.model.named_parameters() if id(p) in lost]
            more = f" and {len(names) - 1} more" if len(names) > 1 else ""
            raise CacheRefusedError(
                f"no clean cut at '{cut.path}': trainable tensor '{names[0] if names else '?'}'{more} "
                "acts before it and would stop training on cached steps"
            )


def owner_sites(model: nn.Module) -> dict[str, list[str] | None]:
    """Where each trainable parameter acts when no plan says: in every module that holds it.

    Args:
        model: the model.

    Returns:
        ``{parameter name: [module paths]}`` for the parameters that require a gradient.
    """
    out: dict[str, list[str] | None] = {}
    first: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            sites = out.setdefault(first.setdefault(id(p), name), [])
            assert sites is not None
            sites.append(name.rpartition(".")[0])
    return out


def summarize(stats: CacheStats) -> dict[str, Any]:
    """The cache's numbers for a run's summary (non-finite rates as None).

    Args:
        stats: the cache's stats.

    Returns:
        A JSON-ready dict.
    """
    d = stats.to_dict()
    if isinstance(d["hit_rate"], float) and not math.isfinite(d["hit_rate"]):
        d["hit_rate"] = None
    return d


@dataclass
class CacheSetup:
    """What :func:`build_cache` decided.

    Attributes:
        cache: the cache, or None when it is off.
        loader: the loader to train from (records sample indices when the cache is on).
        note: one line saying why the cache is off (empty when on, or off by request).
    """

    cache: FrozenPrefixCache | None
    loader: DataLoader[Any]
    note: str = ""


def build_cache(
    config: Any, model: nn.Module, forward: Callable[..., Any], loader: DataLoader[Any], applied: Any,
    device: torch.device, *, distributed: bool, total_steps: int, steps_per_epoch: int | None,
    freezes_later: bool = False,
) -> CacheSetup:
    """Decide on the frozen-prefix cache for a run (``config.cache_frozen``) and build it.

    Args:
        config: the run's :class:`~workbench.core.training.config.TrainConfig`
            (``cache_frozen``, ``cache_budget``).
        model: the model, plan applied.
        forward: what runs a batch.
        loader: the training loader.
        applied: the run's applied plan.
        device: the training device.
        distributed: under torchrun.
        total_steps: steps the run takes.
        steps_per_epoch: batches per epoch, None when unknown.
        freezes_later: stages or auto-freeze may freeze a prefix later (a run that starts
            with everything trainable still gets the cache then).

    Returns:
        The decision.

    Raises:
        CacheRefusedError: ``cache_frozen="on"`` and the run cannot use the cache (the message
            says why).
    """
    from workbench.core.training.cache_store import default_budget, parse_budget

    mode = config.cache_frozen
    if mode == "off":
        return CacheSetup(None, loader)
    if mode == "auto" and steps_per_epoch is not None and total_steps <= steps_per_epoch:
        return CacheSetup(None, loader, "")  # the run ends within its first epoch: nothing would be served
    if mode == "auto" and all(p.requires_grad for p in model.parameters()) and not freezes_later:
        return CacheSetup(None, loader, "")  # full fine-tuning: nothing frozen to cache
    why, data_only = static_refusal(config, applied, loader.dataset, distributed=distributed)
    if why is not None and not (mode == "on" and data_only):
        if mode == "on":
            raise CacheRefusedError(f"--cache-frozen on: {why}")
        return CacheSetup(None, loader, f"frozen-prefix cache off: {why}")
    budget = parse_budget(config.cache_budget)
    if budget is None:
        budget = default_budget(device)
    label_only = reads_labels_alone(loader.dataset)
    new_loader, queue = index_recording_loader(loader, label_only=label_only)
    n = len(loader.dataset)  # type: ignore[arg-type]
    cache = FrozenPrefixCache(model, forward, queue, n, device, budget, None,
                              sites=applied.acting_sites if applied is not None else None)
    if label_only:
        cache.label_only_batches(loader.dataset, loader.collate_fn)
    return CacheSetup(cache, new_loader)

"""One forward pass on the ``meta`` device: what a training step of the model stores and computes.

:func:`profile_model` runs a shape-only copy of the model (no real compute, no real memory)
with every parameter requiring a gradient and records, in execution order:

- every aten op: the module it ran in, its FLOPs (torch's FLOP formulas; elementwise ops
  count one per output element), the bytes of its outputs and the parameters it read;
- every tensor autograd saves for backward (``saved_tensors_hooks``), once per storage, with
  the op positions that saved it, parameters, buffers and the input batch left out.

Attention (``scaled_dot_product_attention``) runs as the fused kernel CPU and CUDA pick, not
as the meta device's math fallback that would store the whole attention matrix: during the
pass the function in ``torch.nn.functional`` is swapped for one that does so on meta tensors
only (any other caller gets torch's own function).

From that one record the advisor derives, for any choice of trainable parameters, the
activations kept for backward (only ops from the first trainable parameter on save
anything: a frozen prefix keeps none) and the relative step time, without running the model
again. A profile is plain data: it holds no reference to the model.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from workbench.core.advisor.meta_kernels import fast_meta_kernel
from workbench.core.collector import collector_paused
from workbench.core.errors import WorkbenchError
from workbench.core.models.meta_copy import Checkpoint, meta_copy, no_checkpoint
from workbench.core.models.tree import is_batchnorm
from workbench.core.training.auto_freeze_cost import counts_macs, module_macs
from workbench.core.training.data import text_task_of
from workbench.core.training.memory_probe import tensors_in

__all__ = [
    "AdvisorError",
    "DictBatch",
    "InputShape",
    "ModelProfile",
    "OpRecord",
    "ParamRecord",
    "SavedStorage",
    "batch_size_of",
    "batch_template",
    "batch_text",
    "is_text_model",
    "meta_batch",
    "paced_train",
    "storage_key",
    "meta_copy",
    "profile_model",
]


class AdvisorError(WorkbenchError):
    """The advisor cannot answer for this model or these settings; the message says what to do."""


@dataclass(frozen=True)
class DictBatch:
    """The input batch of a model whose forward takes keyword tensors (a dataset whose inputs are
    dicts of tensors): each key's batch shape and dtype, read from one sample (:func:`batch_template`).

    Attributes:
        entries: ``(key, batch shape, dtype name)`` per input tensor, in the sample's order.
    """

    entries: tuple[tuple[str, tuple[int, ...], str], ...]

    @property
    def batch_size(self) -> int:
        """Samples in the batch (the first dimension of every entry)."""
        return self.entries[0][1][0] if self.entries and self.entries[0][1] else 1

    def with_batch(self, batch_size: int) -> DictBatch:
        """The same inputs in batches of ``batch_size``."""
        return DictBatch(tuple((k, (batch_size, *s[1:]), d) for k, s, d in self.entries))

    def to_json(self) -> dict[str, list[int]]:
        """``{key: batch shape}`` as JSON-able lists."""
        return {k: list(s) for k, s, _ in self.entries}

    def meta(self) -> dict[str, torch.Tensor]:
        """The batch as meta tensors (shapes and dtypes only), keyed as the model takes them."""
        return {k: torch.empty(s, device="meta", dtype=getattr(torch, d)) for k, s, d in self.entries}


#: The input batch the advisor profiles: one tensor's batch shape (``(32, 3, 224, 224)``,
#: ``(batch, seq_len)`` for text models), or a :class:`DictBatch` for dict inputs.
InputShape = tuple[int, ...] | DictBatch


def batch_template(sample: Any, batch_size: int) -> InputShape:
    """The batch a dataset item's input makes: ``(batch, *x.shape)`` for a tensor, a
    :class:`DictBatch` for a dict of tensors, ``(batch, seq_len)`` for token dicts (``input_ids``).

    Args:
        sample: a dataset item ``(input, target)``, or the input alone.
        batch_size: samples per batch.

    Returns:
        The batch shape, or the dict batch.

    Raises:
        AdvisorError: the input is not a tensor or a dict of tensors (the message names what it is).
    """
    x = sample[0] if isinstance(sample, (tuple, list)) else sample
    if isinstance(x, Mapping):
        ids = x.get("input_ids")
        if isinstance(ids, torch.Tensor):
            return (batch_size, int(ids.shape[-1]))
        bad = [k for k, v in x.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
        if not x or bad:
            raise AdvisorError("the data's first sample has a dict input " + (f"whose entry {bad[0]!r} is not a tensor"
                               if bad else "with no entries") + "; give --input-shape of a tensor input instead")
        return DictBatch(tuple((k, (batch_size, *(int(d) for d in v.shape)), str(v.dtype).removeprefix("torch."))
                               for k, v in x.items()))
    if isinstance(x, torch.Tensor):
        return (batch_size, *(int(d) for d in x.shape))
    raise AdvisorError(f"the data's first sample has an input of type {type(x).__name__}, not a tensor or a dict "
                       "of tensors; give --input-shape instead")


def batch_size_of(shape: InputShape) -> int:
    """Samples in a batch of ``shape`` (1 for an empty shape)."""
    if isinstance(shape, DictBatch):
        return shape.batch_size
    return shape[0] if shape else 1


def batch_text(shape: InputShape) -> str:
    """``32x1024``, or for a dict batch ``audio 32x1024, mask 32x1024 int64`` (non-float dtypes named)."""
    if isinstance(shape, DictBatch):
        return ", ".join(f"{k} {'x'.join(map(str, s))}" + ("" if d.startswith(("float", "bfloat")) else f" {d}")
                         for k, s, d in shape.entries)
    return "x".join(str(s) for s in shape)


@dataclass(frozen=True)
class OpRecord:
    """One aten op of the forward pass.

    Attributes:
        module: dotted path of the innermost module that ran it (``""`` for the root).
        flops: forward FLOPs (matmul/conv: torch's formulas; views: 0; other ops: output elements).
        out_bytes: bytes of the outputs that are new tensors (views and in-place ops: 0).
        params: names of the parameters the op read (directly or through a view).
    """

    module: str
    flops: int
    out_bytes: int
    params: tuple[str, ...] = ()


@dataclass(frozen=True)
class ParamRecord:
    """A parameter of the profiled model.

    Attributes:
        name: dotted parameter name (``layer4.1.conv2.weight``).
        owner: dotted path of the module that registers it.
        numel: elements.
        nbytes: bytes (elements x element size of its dtype).
        first_use: position of the first op that read it (None: never used in forward).
        last_use: position of the last op that read it.
    """

    name: str
    owner: str
    numel: int
    nbytes: int
    first_use: int | None
    last_use: int | None


@dataclass(frozen=True)
class SavedStorage:
    """A tensor storage autograd keeps for backward.

    Attributes:
        nbytes: bytes of the storage.
        saves: op positions whose backward needs it, ascending.
    """

    nbytes: int
    saves: tuple[int, ...]


@dataclass
class ModelProfile:
    """What one forward pass of a model stores and computes (see the module docstring).

    Attributes:
        input_shape: shape of the input batch (a :class:`DictBatch` for dict inputs).
        input_bytes: bytes of the input batch.
        ops: forward ops in execution order (an op's position is its index).
        saved: storages saved for backward.
        params: parameters in registration order (shared tensors once).
        buffer_bytes: bytes of the buffers (BatchNorm running statistics ...).
        module_order: module paths in the order they first ran.
        bn_eval: whether BatchNorm modules ran on running statistics.
        transients: every storage the forward pass created, as ``(created, last_use,
            nbytes, saves)``: the op that made it, the last op that read it, its bytes and
            the op positions whose backward saved it (what a frozen forward keeps alive
            between ops: inputs of later ops, residual branches, outputs not yet consumed).
        module_macs: multiply-accumulates per module path on the pass, as auto-freeze counts them on a run's
            first forward (:func:`~workbench.core.training.auto_freeze_cost.module_macs`, for the modules
            :func:`~workbench.core.training.auto_freeze_cost.counts_macs` takes).
    """

    input_shape: InputShape
    input_bytes: int
    ops: list[OpRecord] = field(default_factory=list)
    saved: list[SavedStorage] = field(default_factory=list)
    params: list[ParamRecord] = field(default_factory=list)
    buffer_bytes: int = 0
    module_order: list[str] = field(default_factory=list)
    bn_eval: bool = False
    transients: list[tuple[int, int, int, tuple[int, ...]]] = field(default_factory=list)
    module_macs: dict[str, int] = field(default_factory=dict)

    @property
    def param_bytes(self) -> int:
        """Bytes of all parameters."""
        return sum(p.nbytes for p in self.params)

    @property
    def total_flops(self) -> int:
        """Forward FLOPs of the whole model."""
        return sum(op.flops for op in self.ops)

    def params_of(self, modules: set[str]) -> list[ParamRecord]:
        """The parameters registered by any of ``modules`` (dotted paths).

        Args:
            modules: module paths.

        Returns:
            Their parameters, in registration order.
        """
        return [p for p in self.params if p.owner in modules]


def paced_train(model: nn.Module, checkpoint: Checkpoint = no_checkpoint) -> None:
    """``model.train()``, calling ``checkpoint`` between modules (half a second on 50,000 modules).

    A module whose class has its own ``train`` is put in training mode by it, its subtree with it.

    Args:
        model: the model.
        checkpoint: called before each module.
    """
    done: set[int] = set()  # the subtrees of modules with their own train()
    for m in model.modules():
        checkpoint()
        if id(m) in done:
            continue
        if type(m).train is not nn.Module.train:
            m.train()
            done.update(id(sub) for sub in m.modules())
        else:
            m.training = True


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def storage_key(t: torch.Tensor) -> int:
    """The identity of a tensor's storage (its C++ object: Python storage wrappers come and go).

    Args:
        t: a tensor.

    Returns:
        An int, the same for every tensor that shares the storage.
    """
    return int(t.untyped_storage()._cdata)


def is_text_model(model: nn.Module) -> bool:
    """Whether ``model`` takes token ids (a transformers model with a vocabulary and a task head).

    Args:
        model: any module.

    Returns:
        True for text models (their input shape is ``(batch, seq_len)``).

    Raises:
        AdvisorError: a text model without a task head (nothing to train against).
    """
    if _extra_head(model) is not None:
        return True
    try:
        return text_task_of(model) is not None
    except WorkbenchError as e:
        raise AdvisorError(str(e)) from None


def _extra_head(model: nn.Module) -> str | None:
    """Text heads the training data does not cover but the advisor does: ``token`` (a label per
    token: ``...ForTokenClassification``) or ``qa`` (``...ForQuestionAnswering``), else None."""
    if not isinstance(getattr(getattr(model, "config", None), "vocab_size", None), int):
        return None
    name = type(model).__name__
    if name.endswith("ForTokenClassification"):
        return "token"
    if name.endswith("ForQuestionAnswering"):
        return "qa"
    return None


def meta_batch(model: nn.Module, input_shape: InputShape, dtype: torch.dtype) -> dict[str, torch.Tensor] | torch.Tensor:
    """A shape-only input batch for ``model`` on the ``meta`` device.

    Text models get the batch the training engine feeds them (synthetic token data):
    ``input_ids`` and ``labels`` (per sequence for classification, per token for language
    modelling and token classification; an answer span for question answering); the all-ones attention mask of synthetic data is left out, as transformers
    drops it before attention. A :class:`DictBatch` gives its keyword tensors as the data has
    them; other models get one tensor of ``input_shape``.

    Args:
        model: the model.
        input_shape: ``(batch, seq_len)`` for text models, a :class:`DictBatch` for dict
            inputs, the image (or other) batch shape otherwise.
        dtype: dtype of a one-tensor batch.

    Returns:
        A dict of meta tensors (text) or one meta tensor.

    Raises:
        AdvisorError: a text model with an input shape that is not ``(batch, seq_len)``, or
            without a task head.
    """
    if isinstance(input_shape, DictBatch):
        return input_shape.meta()
    extra = _extra_head(model)
    if extra is not None:
        if len(input_shape) != 2:
            raise AdvisorError(f"a text model takes (batch, seq_len) token batches, got input shape {tuple(input_shape)}; use --seq-len")
        ids = torch.empty(input_shape, device="meta", dtype=torch.long)
        if extra == "token":  # a label per token
            return {"input_ids": ids, "labels": torch.empty(input_shape, device="meta", dtype=torch.long)}
        pos = torch.empty(input_shape[:1], device="meta", dtype=torch.long)  # extractive QA: answer span
        return {"input_ids": ids, "start_positions": pos, "end_positions": pos.clone()}
    try:
        task = text_task_of(model)
    except WorkbenchError as e:
        raise AdvisorError(str(e)) from None
    if task is None:
        return torch.empty(input_shape, device="meta", dtype=dtype)
    if len(input_shape) != 2:
        raise AdvisorError(f"a text model takes (batch, seq_len) token batches, got input shape {tuple(input_shape)}; use --seq-len")
    ids = torch.empty(input_shape, device="meta", dtype=torch.long)
    labels = torch.empty(input_shape[:1] if task == "classification" else input_shape, device="meta", dtype=torch.long)
    return {"input_ids": ids, "labels": labels}


#: Ops without a FLOP formula of their own that compute what another op computes.
_FLOP_ALIASES = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: torch.ops.aten._scaled_dot_product_flash_attention,
}


@contextlib.contextmanager
def _no_value_checks(model: nn.Module, checkpoint: Checkpoint = no_checkpoint) -> Iterator[None]:
    """Skip checks that read token values (meta tensors have none) for the shape-only pass.

    transformers warns when a pad token appears without an attention mask
    (``warn_if_padding_and_no_attention_mask``: ``pad_token_id in input_ids``, an ``.item()``),
    e.g. GPT-2 with a sequence-classification head; the warning changes nothing computed.
    """
    patched = []
    for m in model.modules():
        checkpoint()
        if callable(getattr(m, "warn_if_padding_and_no_attention_mask", None)):
            m.warn_if_padding_and_no_attention_mask = lambda *_a, **_k: None  # type: ignore[assignment]
            patched.append(m)
    try:
        yield
    finally:
        for m in patched:
            with contextlib.suppress(AttributeError):
                del m.warn_if_padding_and_no_attention_mask


def _output_storages(out: Any, depth: int = 0, seen: set[int] | None = None) -> set[int]:
    """Storage keys of the tensors a model's output holds: tensors in tuples, lists, dicts,
    model-output records and cache objects (their attributes), a few levels deep."""
    seen = set() if seen is None else seen
    found: set[int] = set()
    if depth > 6 or id(out) in seen:
        return found
    seen.add(id(out))
    if isinstance(out, torch.Tensor):
        found.add(storage_key(out))
    elif isinstance(out, dict):
        for v in out.values():
            found |= _output_storages(v, depth + 1, seen)
    elif isinstance(out, (list, tuple)):
        for v in out:
            found |= _output_storages(v, depth + 1, seen)
    elif hasattr(out, "__dict__") and not isinstance(out, (nn.Module, type)):
        for v in vars(out).values():
            if isinstance(v, (torch.Tensor, dict, list, tuple)) or hasattr(v, "__dict__"):
                found |= _output_storages(v, depth + 1, seen)
    return found


#: What the pass's saved-tensor hook keeps of a tensor: its storage, offset, shape, stride and dtype.
_StorageView = tuple[torch.UntypedStorage, int, torch.Size, tuple[int, ...], torch.dtype]


def _storage_view(t: torch.Tensor) -> _StorageView:
    """What autograd keeps of a saved tensor during the pass: the tensor rebuilt from it is the
    same view of the same storage, but it holds no ``grad_fn``. Kept itself, a saved output would
    hold the node that saves it (tensor, node and saved tensor a cycle through C++ that no
    collection frees), and with it the hook's closure: the recorder, its checkpoint and whatever
    the checkpoint's caller holds (the app's window, whose estimate profiled the model)."""
    return t.untyped_storage(), int(t.storage_offset()), t.shape, t.stride(), t.dtype


def _from_storage_view(view: _StorageView) -> torch.Tensor:
    """The saved tensor again, for a backward pass (autograd gives it back its ``grad_fn``)."""
    storage, offset, shape, stride, dtype = view
    return torch.empty(0, dtype=dtype, device=storage.device).set_(storage, offset, shape, stride)


def _in_parametrization(path: str) -> bool:
    """Whether a module path lies in a ``torch.nn.utils.parametrize`` parametrization (``conv.parametrizations.weight.0``)."""
    return ".parametrizations." in f".{path}."


class _Recorder(TorchDispatchMode):
    """Counts ops, their FLOPs and the parameters they read, and which module ran them."""

    def __init__(self, param_storages: dict[int, str], checkpoint: Checkpoint = no_checkpoint) -> None:
        super().__init__()
        self.param_storages = param_storages
        self.checkpoint = checkpoint
        self.stack: list[str] = [""]
        self.ops: list[OpRecord] = []
        #: storage key -> [created op, last op that read it, bytes]; storages kept referenced
        self.made: dict[int, list[int]] = {}
        #: storage key -> the parameters a parametrization computed it from (exact A+B's ``W = A + B``): an op
        #: that reads it reads them, so its weight gradient counts (the gradient reaches them through it)
        self.derived: dict[int, tuple[str, ...]] = {}
        self._keep: list[Any] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.checkpoint()
        out = fast_meta_kernel(func, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        flat_in = tensors_in((args, kwargs))
        keys = [storage_key(a) for a in flat_in]
        in_storages = set(keys)
        params = tuple(dict.fromkeys(
            n for k in keys
            for n in ((self.param_storages[k],) if k in self.param_storages else self.derived.get(k, ()))
        ))
        outs = tensors_in(out)
        if params and _in_parametrization(self.stack[-1]):  # a weight computed from parameters
            for t in outs:
                self.derived[storage_key(t)] = params
        new = [t for t in outs if storage_key(t) not in in_storages]
        here = len(self.ops)
        for k in in_storages:
            rec = self.made.get(k)
            if rec is not None:
                rec[1] = here
        for t in new:
            k = storage_key(t)
            if k not in self.made and not getattr(func, "is_view", False):
                self.made[k] = [here, here, _nbytes(t)]
                self._keep.append(t.untyped_storage())
        packet = func.overloadpacket
        counter = flop_registry.get(_FLOP_ALIASES.get(packet, packet))
        flops = 0
        if counter is not None:
            try:
                flops = int(counter(*args, **kwargs, out_val=out))
            except Exception:  # a formula that does not take these arguments: count elements
                flops = 0
        if not flops and not getattr(func, "is_view", False):
            flops = sum(t.numel() for t in outs)
        self.ops.append(OpRecord(self.stack[-1], flops, sum(_nbytes(t) for t in new), params))
        return out


_SDPA = torch.nn.functional.scaled_dot_product_attention


def _sdpa_as_on_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                       dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                       **kwargs: Any) -> torch.Tensor:
    """``scaled_dot_product_attention`` that, on meta tensors, runs the fused kernel real devices pick.

    On the ``meta`` device sdpa falls back to the math path, which saves the whole attention
    matrix for backward; CPU and CUDA run a fused kernel (flash / memory-efficient) that saves
    only the output and the log-sum-exp. The CPU flash op has a meta kernel and saves the same
    tensors as the CUDA ones. Other devices, and shapes the fused op does not take, go to
    torch's own function unchanged.
    """
    fused = not (dropout_p and _ATTENTION_DEVICE[0] == "cpu")  # CPU's fused kernel takes no dropout
    if (fused and query.device.type == "meta" and not kwargs.get("enable_gqa")
            and query.shape[:-2] == key.shape[:-2] == value.shape[:-2]):
        try:
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                query, key, value, float(dropout_p), bool(is_causal), attn_mask=attn_mask, scale=scale
            )[0]
        except (RuntimeError, TypeError, ValueError):
            pass  # a mask or layout the fused op does not take: the math path, as on the device
    return _SDPA(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **kwargs)


#: The device type the pass in progress stands for (attention with dropout: fused on CUDA, math on CPU).
_ATTENTION_DEVICE = ["cpu"]


@contextlib.contextmanager
def _fused_attention_on_meta(device_type: str = "cpu") -> Iterator[None]:
    """Route ``torch.nn.functional.scaled_dot_product_attention`` through :func:`_sdpa_as_on_device`."""
    functional = torch.nn.functional
    saved = functional.scaled_dot_product_attention
    functional.scaled_dot_product_attention = _sdpa_as_on_device  # type: ignore[assignment]  # same call signature
    _ATTENTION_DEVICE[0] = device_type
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = saved
        _ATTENTION_DEVICE[0] = "cpu"


@collector_paused()  # millions of objects on a large model, none of them cyclic garbage
def profile_model(
    model: nn.Module,
    input_shape: InputShape,
    *,
    bn_eval: bool = False,
    dtype: torch.dtype | None = None,
    param_dtype: torch.dtype | None = None,
    trainable: Collection[str] | None = None,
    in_place: bool = False,
    device_type: str = "cpu",
    outputs: Callable[[str, Any], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> ModelProfile:
    """Run one forward pass of a meta copy of ``model`` and record what training would store.

    Text models (transformers models with a vocabulary and a task head) are fed a token batch
    of shape ``(batch, seq_len)`` with labels (:func:`meta_batch`), so the loss the model
    computes is part of the pass.

    Args:
        model: the model (any device; it is not changed and nothing real is computed).
        input_shape: shape of one input batch, e.g. ``(8, 3, 224, 224)``; ``(batch, seq_len)``
            for text models; a :class:`DictBatch` for a model whose forward takes keyword tensors.
        bn_eval: BatchNorm modules run on running statistics (eval mode).
        dtype: dtype of an image batch (default: the dtype of the first floating parameter).
        param_dtype: store the floating parameters and buffers in this dtype (default: as
            the model has them), e.g. ``torch.bfloat16`` for a model loaded in 16 bits.
        trainable: names of the parameters that require a gradient during the pass (default:
            all). Autograd then saves exactly what training those needs; with all of them it
            saves what any plan could need from the first trainable op on.
        in_place: profile ``model`` itself instead of a copy; it must already live on the
            ``meta`` device (a copy with a plan applied, whose hooks hold its own modules)
            and it is changed (train mode, ``requires_grad``).
        device_type: the device the prediction is for: attention with dropout runs fused on
            accelerators but as the math path (keeping the attention matrix) on ``cpu``.
        outputs: called with each module's path and output each time the module runs.
        checkpoint: called between ops, modules and records (the pass can pause or stop
            there: a worker thread that lets another thread run alone between calls).

    Returns:
        The profile.

    Raises:
        AdvisorError: the model cannot run on the ``meta`` device or with that input shape.
    """
    tick = checkpoint if checkpoint is not None else no_checkpoint
    if in_place:
        for t in itertools.chain(model.parameters(), model.buffers()):
            tick()
            if t.device.type != "meta":
                raise AdvisorError("profile_model(in_place=True) needs a model on the meta device")
        meta = model
    else:
        meta = meta_copy(model, checkpoint)
    if param_dtype is not None:
        meta.to(param_dtype)
    paced_train(meta, tick)
    names: dict[int, str] = {}
    for name, p in meta.named_parameters():
        tick()
        p.requires_grad_(trainable is None or name in trainable)
        names.setdefault(storage_key(p), name)
    buffers = {storage_key(b): b for b in meta.buffers()}
    if dtype is None:
        dtype = next((p.dtype for p in meta.parameters() if p.is_floating_point()), torch.float32)
    shape = input_shape if isinstance(input_shape, DictBatch) else tuple(input_shape)
    x = meta_batch(meta, shape, dtype)
    batch = list(x.values()) if isinstance(x, dict) else [x]
    recorder = _Recorder(names, tick)
    first_seen: dict[str, int] = {}
    saved: dict[int, tuple[int, list[int]]] = {}
    keep: list[Any] = []  # storages stay referenced so their ids are not reused during the pass
    skip = set(names) | set(buffers) | {storage_key(t) for t in batch}

    def pack(t: torch.Tensor) -> _StorageView:
        st = t.untyped_storage()
        k = storage_key(t)
        if k not in skip:
            if k not in saved:
                keep.append(st)
                saved[k] = (st.nbytes(), [])
            saved[k][1].append(len(recorder.ops))
        return _storage_view(t)

    hooks = []
    macs: dict[str, int] = {}
    for path, mod in meta.named_modules():
        tick()
        if bn_eval and is_batchnorm(mod):
            mod.eval()

        def pre(_m: nn.Module, _a: Any, path: str = path) -> None:
            tick()
            first_seen.setdefault(path, len(recorder.ops))
            recorder.stack.append(path)

        def post(m: nn.Module, a: Any, o: Any, path: str = path, counted: bool = counts_macs(mod)) -> None:
            tick()
            recorder.stack.pop()
            if counted:
                macs[path] = macs.get(path, 0) + module_macs(m, a, o)
            if outputs is not None:
                outputs(path, o)

        hooks.append(mod.register_forward_pre_hook(pre))
        hooks.append(mod.register_forward_hook(post))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, _from_storage_view), _fused_attention_on_meta(device_type), \
                _no_value_checks(meta, tick), recorder:
            out = meta(**x) if isinstance(x, dict) else meta(x)
            # what the model returns (logits, and e.g. GPT-2's key/value cache) lives to the
            # end of its forward, although no later op reads it
            end = len(recorder.ops) - 1
            for k in _output_storages(out):
                rec = recorder.made.get(k)
                if rec is not None:
                    rec[1] = max(rec[1], end)
            del out
    except AdvisorError:
        raise
    except Exception as e:
        raise AdvisorError(
            f"the model could not run a shape-only forward pass with input {batch_text(shape) if isinstance(shape, DictBatch) else shape}: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
            + ("check the keys and shapes of the data's dict inputs (the model must take them as keywords)"
               if isinstance(shape, DictBatch) else
               "check --seq-len and --batch-size (the model must accept them)" if isinstance(x, dict) else
               "give the shape of one sample the model takes with --input-shape (e.g. 1024 for audio frames, "
               "3,224,224 for images) or --data to read it from the data")
        ) from None
    finally:
        for h in hooks:
            h.remove()
    uses: dict[str, list[int]] = {}
    computing: dict[str, list[int]] = {}  # reads by a parametrization computing a weight: the layer's read counts
    for i, op in enumerate(recorder.ops):
        if op.params:
            tick()
        for n in op.params:
            (computing if _in_parametrization(op.module) else uses).setdefault(n, []).append(i)
    params = []
    for name in names.values():
        tick()
        p = meta.get_parameter(name)
        u = uses.get(name) or computing.get(name)
        params.append(ParamRecord(name, name.rpartition(".")[0], p.numel(), _nbytes(p),
                                  u[0] if u else None, u[-1] if u else None))
    return ModelProfile(
        input_shape=shape,
        input_bytes=sum(_nbytes(t) for t in batch),
        ops=recorder.ops,
        saved=[SavedStorage(n, tuple(s)) for n, s in saved.values()],
        params=params,
        buffer_bytes=sum(_nbytes(b) for b in buffers.values()),
        module_order=sorted(first_seen, key=lambda p: first_seen[p]),
        transients=[(c, u, b, tuple(saved[k][1]) if k in saved else ()) for k, (c, u, b) in recorder.made.items()],
        bn_eval=bn_eval,
        module_macs=macs,
    )

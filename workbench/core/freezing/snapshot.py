"""Proof that a freezing setup did what it claims: tensor digests, identity and place.

The freezing layer owns the snapshot (it is taken when a plan is applied or updated);
:mod:`workbench.core.checks.verify` is the public report side and re-exports these names.

A :class:`Snapshot` records a digest of every tensor that must not change (frozen
parameters, the fixed part A of A+B, running statistics of BatchNorm kept in eval mode) and of
every trainable tensor. :func:`compare` checks them again after training: frozen tensors must
be bit-identical (a hash, not ``allclose``), eval-mode BatchNorm statistics must not have
moved, and each trainable tensor should have changed.

The other half is that what should train did. A :class:`GradWatch` looks after each optimizer
step at which trainable tensors hold a gradient (``grad is not None``: no copy, no sync) and
which an optimizer with a learning rate above 0 holds; :func:`compare` then reports, by name,
a trainable tensor that never received a gradient, stopped receiving them, or never changed
(its digest at the start and at the end): a warning after a short run, an error from
:data:`MIN_STEPS_FOR_ERROR` optimizer steps on when an optimizer should have moved it. A report
of a run that took no optimizer step says that nothing trained, never "OK".

The snapshot also records, per tensor, whether the plan left it trainable. Verification uses
the snapshot's categories, not the model's ``requires_grad`` at check time, so a tensor the
plan froze that was switched back on (by hand, or by a second plan) and changed is still an
error, and the switch itself is reported as ``plan_not_in_force``.

Values alone can be fooled by structure: a frozen conv wrapped in a new module, a frozen
weight tied to another, a frozen stage replaced by ``nn.Identity`` all take the frozen tensor
out of the model, and a check of the tensors that are still there passes. So the snapshot also
records, for every tensor that must not change (frozen, fixed A, eval-BN statistics), its
:class:`Place`: that it is a parameter or a buffer under its name, the object itself (a
parameter must stay the same object: ``model.to(device)`` keeps it), the other names that
share its storage at apply time, and the type of every module on its path. Any difference is
an error naming the tensor and what changed (``frozen_missing``, ``frozen_replaced``,
``frozen_tied``, ``module_replaced``, ``kind_changed``).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = [
    "DENSE_LOOKS",
    "DIGEST_CHUNK_BYTES",
    "LOOK_EVERY",
    "MIN_STEPS_FOR_ERROR",
    "MIN_STEPS_FOR_UNCHANGED",
    "GUARDED",
    "GradSeen",
    "GradWatch",
    "Place",
    "check_places",
    "model_places",
    "Snapshot",
    "Violation",
    "VerifyReport",
    "compare",
    "compare_in_force",
    "host_chunks",
    "model_tensors",
    "tensor_digest",
]


#: Bytes hashed at a time: a tensor on another device comes to the host one chunk at a time, and
#: a non-contiguous tensor is made contiguous one chunk at a time (never a full-size copy).
DIGEST_CHUNK_BYTES = 16 * 2**20


def host_chunks(t: torch.Tensor, chunk_bytes: int | None = None) -> Iterator[torch.Tensor]:
    """A tensor's bytes in row-major order, as CPU ``uint8`` tensors of at most ``chunk_bytes``.

    A contiguous CPU tensor yields views of its own memory (no copy); a tensor on another
    device, or a non-contiguous one, yields one chunk-sized copy at a time, so no full-size
    host (or device) copy is ever made.

    Args:
        t: a dense tensor with at least one element, on any device.
        chunk_bytes: the largest chunk (default :data:`DIGEST_CHUNK_BYTES`).

    Yields:
        1-D ``uint8`` CPU tensors whose concatenation is the bytes of ``t.contiguous()``.
    """
    limit = max(1, chunk_bytes or DIGEST_CHUNK_BYTES)
    if t.is_contiguous():
        flat = t.reshape(-1).view(torch.uint8)  # a view: same memory, same device
        for start in range(0, flat.numel(), limit):
            piece = flat[start:start + limit]
            yield piece if piece.device.type == "cpu" else piece.to("cpu")
        return
    row_bytes = t[0].numel() * t.element_size()
    rows = max(1, limit // max(row_bytes, 1))
    for i in range(0, t.shape[0], rows):
        if row_bytes > limit:  # one row is larger than a chunk: split it in turn
            yield from host_chunks(t[i], limit)
        else:
            yield from host_chunks(t[i:i + rows].contiguous(), limit)  # copies at most one chunk


def tensor_digest(t: torch.Tensor) -> str:
    """A digest of a tensor's exact bytes, dtype and shape, read on its own device in chunks.

    The digest is that of the dtype, the shape and the bytes of ``t.contiguous()`` in
    row-major order, whatever the device and the memory layout, so digests of one tensor
    taken on the GPU and on the CPU are equal. The bytes are read chunk by chunk
    (:func:`host_chunks`): no full-size host copy of a GPU tensor.

    Args:
        t: any dense tensor, on any device (not ``meta``: it has no values).

    Returns:
        A hex string; equal digests mean bit-identical tensors.
    """
    t = t.detach()
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
    if t.numel():
        for piece in host_chunks(t):
            h.update(piece.numpy().data)
    return h.hexdigest()


@dataclass(frozen=True)
class Violation:
    """One tensor that did not behave as the plan says.

    Attributes:
        name: dotted name of the tensor (parameter or buffer).
        module: dotted path of the module it belongs to (as shown in the tree).
        kind: ``frozen_changed``, ``bn_stats_changed``, ``fixed_changed`` (A of A+B),
            ``trainable_unchanged``, ``trainable_no_grad`` (never received a gradient),
            ``trainable_grad_stopped`` (received gradients, then none for the rest of the run),
            ``plan_not_in_force`` (``requires_grad`` no longer
            what the plan set), or a change of place (:func:`check_places`):
            ``frozen_missing``, ``frozen_replaced``, ``frozen_tied``, ``module_replaced``,
            ``kind_changed``.
        severity: ``error`` or ``warning``.
        message: what happened and what it means.
    """

    name: str
    module: str
    kind: str
    severity: str
    message: str


@dataclass
class VerifyReport:
    """Result of :meth:`AppliedPlan.verify`.

    Attributes:
        violations: every violation found.
        checked: counts of tensors checked per category.
        module_status: ``{module path: "ok" | "error" | "warning"}`` for every module that
            owns a checked tensor (the GUI colours rows from it).
        steps: optimizer steps the run took, when known (0: nothing trained).
    """

    violations: list[Violation] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)
    module_status: dict[str, str] = field(default_factory=dict)
    steps: int | None = None

    @property
    def ok(self) -> bool:
        """No error-level violation: the plan held (see :attr:`trained` for whether anything trained)."""
        return not self.errors

    @property
    def trained(self) -> bool:
        """The run took an optimizer step (True when unknown: a report made outside a run)."""
        return self.steps is None or self.steps > 0

    @property
    def errors(self) -> list[Violation]:
        """Error-level violations."""
        return [v for v in self.violations if v.severity == "error"]

    @property
    def warnings(self) -> list[Violation]:
        """Warning-level violations."""
        return [v for v in self.violations if v.severity == "warning"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "ok": self.ok,
            "steps": self.steps,
            "trained": self.trained,
            "checked": dict(self.checked),
            "violations": [v.__dict__ for v in self.violations],
            "module_status": dict(self.module_status),
        }

    def summary(self) -> str:
        """One line: what was checked and how it went."""
        c = self.checked
        head = (
            f"{c.get('frozen', 0)} frozen tensors, {c.get('fixed', 0)} fixed tensors (A of A+B, frozen slices), "
            f"{c.get('bn_stats', 0)} eval-BN buffers, {c.get('trainable', 0)} trainable tensors checked"
        )
        if not self.trained:  # never "OK": a run that took no step proves nothing trained
            state = "FAILED" if not self.ok else "nothing trained"
            return (f"verify {state}: the run took no optimizer step, so nothing trained; "
                    f"{len(self.errors)} errors; {head}")
        if self.ok and not self.violations:
            return f"verify OK: {head}"
        return f"verify {'OK' if self.ok else 'FAILED'}: {len(self.errors)} errors, {len(self.warnings)} warnings; {head}"

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  {v.severity}: {v.name}: {v.message}" for v in self.violations]
        return "\n".join(lines)


_MESSAGES = {
    "frozen": ("frozen_changed", "error", "frozen tensor changed during training"),
    "fixed": ("fixed_changed", "error", "fixed tensor A of A+B changed; only B may train"),
    "bn_stats": (
        "bn_stats_changed",
        "error",
        "running statistics of a BatchNorm kept in eval mode moved (it ran in train mode)",
    ),
    "trainable": (
        "trainable_unchanged",
        "warning",
        "trainable tensor did not change (no gradient reached it, or lr is 0)",
    ),
}


#: Categories whose tensors must not change: each is checked for identity and place too.
GUARDED = ("frozen", "fixed", "bn_stats")


@dataclass(frozen=True)
class Place:
    """Where a guarded tensor was when the snapshot was taken.

    Attributes:
        kind: ``parameter`` or ``buffer`` (the model lists it under its name), or ``held``
            (held by an installed technique, e.g. A of fused A+B: only its module path is checked).
        ref: a weak reference to the parameter object (None for buffers: ``model.to(device)``
            replaces buffer objects, so a buffer is checked by value, name, kind and sharing).
        aliases: the other names that shared its storage (or were the same object).
        chain: ``(module path, module type)`` for the root and every module on its path.
    """

    kind: str
    ref: weakref.ReferenceType[torch.Tensor] | None
    aliases: frozenset[str]
    chain: tuple[tuple[str, type], ...]


def _storage_key(t: torch.Tensor) -> int | None:
    if t.is_meta or t.numel() == 0:
        return None
    try:
        return int(t.untyped_storage().data_ptr())
    except Exception:  # a tensor subclass without a plain storage (a sharded DTensor): identity only
        return None


def model_places(model: nn.Module) -> tuple[dict[str, str], dict[str, torch.Tensor], dict[str, frozenset[str]]]:
    """Every parameter and buffer under every name it has (tied names included).

    Args:
        model: the model.

    Returns:
        ``(kind by name, tensor by name, aliases by name)``: kind is ``parameter`` or
        ``buffer``; aliases are the other names of the same object or of the same storage.
    """
    kinds: dict[str, str] = {}
    tensors: dict[str, torch.Tensor] = {}
    for name, b in model.named_buffers(remove_duplicate=False):
        kinds[name], tensors[name] = "buffer", b
    for name, p in model.named_parameters(remove_duplicate=False):
        kinds[name], tensors[name] = "parameter", p
    groups: dict[tuple[str, int], set[str]] = {}
    for name, t in tensors.items():
        groups.setdefault(("id", id(t)), set()).add(name)
        key = _storage_key(t)
        if key is not None:
            groups.setdefault(("storage", key), set()).add(name)
    aliases: dict[str, set[str]] = {n: set() for n in tensors}
    for members in groups.values():
        if len(members) > 1:
            for n in members:
                aliases[n] |= members - {n}
    return kinds, tensors, {n: frozenset(a) for n, a in aliases.items()}


def _chain(model: nn.Module, name: str) -> tuple[tuple[str, type], ...]:
    """The root and each module on the path of a tensor name, with its type (as far as modules go)."""
    out: list[tuple[str, type]] = [("", type(model))]
    parts = name.split(".")[:-1]
    m: nn.Module = model
    for i, part in enumerate(parts):
        child = m._modules.get(part)
        if child is None:
            break
        m = child
        out.append((".".join(parts[: i + 1]), type(m)))
    return tuple(out)


def _type_name(t: type) -> str:
    return t.__name__


@dataclass
class Snapshot:
    """Digests of tensors by category: ``frozen``, ``fixed``, ``bn_stats``, ``trainable``.

    Each entry maps a tensor name to ``(module path, digest)``. :attr:`places` holds the
    identity and place of the guarded tensors (see :meth:`record_places`).
    """

    entries: dict[str, dict[str, tuple[str, str]]] = field(
        default_factory=lambda: {k: {} for k in _MESSAGES}
    )
    #: ``requires_grad`` the plan set, per parameter name (frozen, fixed and trainable tensors).
    requires_grad: dict[str, bool] = field(default_factory=dict)
    #: identity and place per guarded tensor name (empty: values only, as for FSDP shards).
    places: dict[str, Place] = field(default_factory=dict)

    def record_places(self, model: nn.Module, *, keep: bool = True) -> None:
        """Record the identity and place of every guarded tensor of the snapshot.

        Args:
            model: the model the names refer to.
            keep: keep an existing place for a name instead of recording it again.
        """
        kinds, tensors, aliases = model_places(model)
        for category in GUARDED:
            for name in self.entries[category]:
                if keep and name in self.places:
                    continue
                kind = kinds.get(name)
                if kind is None:
                    self.places[name] = Place("held", None, frozenset(), _chain(model, name))
                    continue
                t = tensors[name]
                ref = weakref.ref(t) if kind == "parameter" else None
                self.places[name] = Place(kind, ref, aliases[name], _chain(model, name))

    def forget_places(self, names: Iterable[str]) -> None:
        """Forget the recorded places of ``names`` (their modules were re-installed)."""
        for n in names:
            self.places.pop(n, None)

    def record(self, category: str, items: Iterable[tuple[str, str, torch.Tensor]], *, keep: bool = False) -> None:
        """Hash tensors into ``category``.

        Args:
            category: one of ``frozen``, ``fixed``, ``bn_stats``, ``trainable``.
            items: ``(tensor name, module path, tensor)``.
            keep: keep an existing digest for a name instead of re-hashing it.
        """
        bucket = self.entries[category]
        for name, module, t in items:
            if category != "bn_stats":
                self.requires_grad[name] = bool(t.requires_grad)
            if keep and name in bucket:
                continue
            bucket[name] = (module, tensor_digest(t))

    def drop(self, category: str, names: Iterable[str]) -> None:
        """Forget tensors of a category."""
        bucket = self.entries[category]
        for n in names:
            bucket.pop(n, None)
            if category != "bn_stats" and not any(n in b for c, b in self.entries.items() if c != "bn_stats"):
                self.requires_grad.pop(n, None)
            if not any(n in self.entries[c] for c in GUARDED):
                self.places.pop(n, None)


def check_places(snapshot: Snapshot, model: nn.Module) -> list[Violation]:
    """The guarded tensors that left their place, changed identity or became shared.

    Args:
        snapshot: a snapshot whose places were recorded (:meth:`Snapshot.record_places`).
        model: the model as it is now.

    Returns:
        One error per tensor that changed, naming the tensor, its module and what changed.
    """
    kinds, tensors, aliases = model_places(model)
    module_of = {n: m for c in GUARDED for n, (m, _) in snapshot.entries[c].items()}
    what = {n: c for c in GUARDED for n in snapshot.entries[c]}
    label = {"frozen": "frozen tensor", "fixed": "fixed tensor A", "bn_stats": "eval-BN statistic"}
    out: list[Violation] = []
    for name, place in snapshot.places.items():
        if name not in what:
            continue
        module, noun = module_of[name], label[what[name]]
        problem: tuple[str, str] | None = None
        for path, typ in place.chain:
            try:
                m = model.get_submodule(path) if path else model
            except AttributeError:
                problem = ("module_replaced", f"module {path} is gone from the model (replaced or removed)")
                break
            if type(m) is not typ:
                problem = (
                    "module_replaced",
                    f"module {path or '(root)'} was a {_type_name(typ)} when the plan was applied and is a "
                    f"{_type_name(type(m))} now (wrapped or replaced)",
                )
                break
        if problem is None and place.kind != "held":
            kind = kinds.get(name)
            if kind is None:
                problem = ("frozen_missing", f"the model has no tensor named {name} any more (moved, wrapped or deleted)")
            elif kind != place.kind:
                problem = ("kind_changed", f"it was a {place.kind} when the plan was applied and is a {kind} now")
            elif place.ref is not None and tensors[name] is not place.ref():
                problem = ("frozen_replaced", "it is another object than the one the plan froze (replaced or swapped)")
            elif aliases[name] != place.aliases:
                gained, lost = sorted(aliases[name] - place.aliases), sorted(place.aliases - aliases[name])
                change = f"it now shares its storage with {', '.join(gained[:3])}" if gained else (
                    f"it no longer shares its storage with {', '.join(lost[:3])}")
                problem = ("frozen_tied", change + " (tied or untied after the plan was applied)")
        if problem is not None:
            kind_, msg = problem
            out.append(Violation(name, module, kind_, "error", f"{msg}: this {noun}'s value is no longer proven"))
    return out


#: Below this many optimizer steps an unchanged trainable tensor is no evidence of a problem.
MIN_STEPS_FOR_UNCHANGED = 10
#: From this many optimizer steps on, a trainable tensor that an optimizer with a learning rate
#: above 0 holds, and that never received a gradient, stopped receiving them for the rest of
#: the run, or never changed, is an error rather than a warning: after this long it is no
#: accident of a short run (a few steps of a tiny learning rate can round away in float32;
#: a hundred cannot, and a tensor cut out of the graph never comes back by itself).
MIN_STEPS_FOR_ERROR = 100


@dataclass(frozen=True)
class GradSeen:
    """What a :class:`GradWatch` saw of the trainable tensors' gradients over a run.

    Attributes:
        steps: optimizer steps looked at.
        last_step: the step number of the last step whose gradients were read (-1 before any).
        first: per tensor name, the first step it held a gradient.
        last: per tensor name, the last step it held a gradient.
        moving: names an optimizer held with a learning rate above 0 at some look.
    """

    steps: int = 0
    last_step: int = -1
    first: Mapping[str, int] = field(default_factory=dict)
    last: Mapping[str, int] = field(default_factory=dict)
    moving: frozenset[str] = frozenset()


#: A :class:`GradWatch` reads the gradients after each of a run's first this many steps ...
DENSE_LOOKS = 16
#: ... and then after every this many steps.
LOOK_EVERY = 8


class GradWatch:
    """Which trainable tensors receive a gradient during a run: looked at after each optimizer step.

    A look reads ``grad is not None`` of each parameter that requires a gradient (no copy, no
    device sync) and the learning rates of the optimizer's groups; nothing is stored per step.
    Reading ``grad`` costs a few microseconds a parameter, so after the first
    :data:`DENSE_LOOKS` steps the gradients are read every :data:`LOOK_EVERY` steps (fewer
    than :data:`MIN_STEPS_FOR_UNCHANGED`, so a tensor still training at the end is never
    taken for one that stopped).

    Args:
        model: the model (its parameters by their first name, as the snapshot names them).
        optimizer: the run's optimizer, or None (then no tensor counts as one it should move).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        self._params = list(model.named_parameters())
        self._optimizer = optimizer
        self._first: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._moving_groups: dict[int, dict[str, Any]] = {}
        self.steps = 0
        self.last_step = -1

    def look(self, step: int) -> None:
        """Note which trainable tensors hold a gradient after optimizer step ``step``.

        Args:
            step: the step number (call it after the optimizer stepped, before the next
                step drops the gradients).
        """
        self.steps += 1
        if self.steps > DENSE_LOOKS and self.steps % LOOK_EVERY:
            return
        self.last_step = step
        first, last = self._first, self._last
        for name, p in self._params:
            if p.grad is not None and p.requires_grad:
                if name not in first:
                    first[name] = step
                last[name] = step
        if self._optimizer is not None:
            for g in self._optimizer.param_groups:
                lr = g.get("lr", 0.0)
                if isinstance(lr, torch.Tensor):
                    lr = float(lr)
                if isinstance(lr, (int, float)) and lr > 0:
                    self._moving_groups[id(g)] = g

    def seen(self) -> GradSeen:
        """What was seen so far.

        Returns:
            The gradients' record, for :func:`compare`.
        """
        ids = {id(p) for g in self._moving_groups.values() for p in g.get("params", [])}
        moving = frozenset(n for n, p in self._params if id(p) in ids)
        return GradSeen(self.steps, self.last_step, dict(self._first), dict(self._last), moving)


def _trainable_finding(name: str, same: bool, grads: GradSeen, quiet: bool) -> tuple[str, str, str] | None:
    """What is wrong with one trainable tensor after a watched run: ``(kind, severity, message)``."""
    n = grads.steps
    if n == 0:
        return None  # nothing trained: the report says so once
    should_move = name in grads.moving
    severity = "error" if n >= MIN_STEPS_FOR_ERROR and should_move else "warning"
    why = "" if should_move else " (no optimizer with a learning rate above 0 holds it)"
    if name not in grads.last:
        return ("trainable_no_grad", severity,
                f"trainable tensor received no gradient in any of the run's {n} optimizer steps: it does not "
                f"reach the loss (unused, or cut out of the graph){why}")
    tail = grads.last_step - grads.last[name]
    if tail >= MIN_STEPS_FOR_UNCHANGED and 2 * tail >= n:
        return ("trainable_grad_stopped", severity,
                f"trainable tensor received gradients up to step {grads.last[name]}, then none in the last "
                f"{tail} steps: something cut it out of the graph (a cache, a hook, a plan change){why}")
    if same and not quiet and n >= MIN_STEPS_FOR_UNCHANGED:
        return ("trainable_unchanged", severity,
                f"trainable tensor received gradients but did not change in {n} optimizer steps "
                f"(lr 0, or the optimizer does not hold it){why}")
    return None


def compare(
    snapshot: Snapshot,
    current: dict[str, dict[str, torch.Tensor]],
    *,
    quiet: Collection[str] = (),
    steps: int | None = None,
    grads: GradSeen | None = None,
) -> VerifyReport:
    """Compare a snapshot with the tensors as they are now.

    ``trainable_unchanged`` is a hint, not a proof, so it stays silent where it is noise: for
    the ``quiet`` tensors (BatchNorm affine parameters: a weight initialised at 1.0 in float32
    has a spacing of 1.2e-7 there, so the small updates of a few steps round away) and after
    fewer than :data:`MIN_STEPS_FOR_UNCHANGED` steps. With ``grads`` (a watched run), a
    trainable tensor is also checked for having received a gradient, and for still receiving
    them at the end (``trainable_no_grad``, ``trainable_grad_stopped``); each finding is an
    error from :data:`MIN_STEPS_FOR_ERROR` steps on when an optimizer should have moved it.

    Args:
        snapshot: digests taken when the plan was applied (or last updated).
        current: ``{category: {tensor name: tensor}}`` for the same categories.
        quiet: trainable tensor names never reported as unchanged.
        steps: optimizer steps since the snapshot, when known (``grads.steps`` when given).
        grads: what a :class:`GradWatch` saw over the run, or None.

    Returns:
        The report. Tensors that vanished from the model are skipped.
    """
    if grads is not None:
        steps = grads.steps
    report = VerifyReport(steps=steps)
    hush_all = steps is not None and steps < MIN_STEPS_FOR_UNCHANGED
    for category, bucket in snapshot.entries.items():
        kind, severity, msg = _MESSAGES[category]
        now = current.get(category, {})
        n = 0
        for name, (module, digest) in bucket.items():
            t = now.get(name)
            if t is None:
                continue
            n += 1
            same = tensor_digest(t) == digest
            found: tuple[str, str, str] | None
            if category != "trainable":
                found = None if same else (kind, severity, msg)
            elif grads is not None:
                found = _trainable_finding(name, same, grads, name in quiet)
            else:
                found = (kind, severity, msg) if same and not (hush_all or name in quiet) else None
            status = report.module_status.get(module, "ok")
            if found is not None:
                report.violations.append(Violation(name, module, *found))
                if found[1] == "error" or status == "ok":
                    status = found[1]
            report.module_status[module] = status
        report.checked[category] = n
    return report


def model_tensors(model: nn.Module, extra: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of a model under every name it has, plus ``extra`` (A of A+B).

    Args:
        model: the model.
        extra: tensors the model does not list under these names.

    Returns:
        ``{name: tensor}``.
    """
    out: dict[str, torch.Tensor] = dict(model.named_buffers(remove_duplicate=False))
    out.update(model.named_parameters(remove_duplicate=False))
    out.update(extra or {})
    return out


def compare_in_force(
    snapshot: Snapshot,
    tensors: Mapping[str, torch.Tensor],
    *,
    quiet: Collection[str] = (),
    steps: int | None = None,
    model: nn.Module | None = None,
    grads: GradSeen | None = None,
) -> VerifyReport:
    """Compare against the plan's own snapshot, whatever the model says is trainable now.

    Each tensor is checked in the category the snapshot put it in; a tensor whose
    ``requires_grad`` is no longer what the plan set gives a ``plan_not_in_force`` error.
    With ``model``, every guarded tensor whose place was recorded is also checked for its
    name, kind, identity, sharing and the modules on its path (:func:`check_places`).

    Args:
        snapshot: digests and ``requires_grad`` recorded when the plan was applied or updated.
        tensors: the model's tensors by name (see :func:`model_tensors`).
        quiet: trainable tensor names never reported as unchanged (see :func:`compare`).
        steps: optimizer steps since the snapshot, when known (see :func:`compare`).
        model: the model as it is now, for the identity and place checks.
        grads: what a :class:`GradWatch` saw over the run (see :func:`compare`).

    Returns:
        The report. A guarded tensor that left the model is an error when ``model`` is given.
    """
    current = {c: {n: tensors[n] for n in bucket if n in tensors} for c, bucket in snapshot.entries.items()}
    report = compare(snapshot, current, quiet=quiet, steps=steps, grads=grads)
    module_of = {n: m for bucket in snapshot.entries.values() for n, (m, _) in bucket.items()}
    for name, expected in snapshot.requires_grad.items():
        t = tensors.get(name)
        if t is None or bool(t.requires_grad) == expected:
            continue
        module = module_of.get(name, "")
        now = "trainable" if t.requires_grad else "frozen"
        report.violations.append(
            Violation(
                name,
                module,
                "plan_not_in_force",
                "error",
                f"plan not in force: the plan left this tensor {'trainable' if expected else 'frozen'} but it "
                f"is {now} now (requires_grad changed by code or by another plan); apply the plan again, "
                "or update it with AppliedPlan.update(plan)",
            )
        )
        report.module_status[module] = "error"
    report.checked["in_force"] = len(snapshot.requires_grad)
    if model is not None and snapshot.places:
        for v in check_places(snapshot, model):
            report.violations.append(v)
            report.module_status[v.module] = "error"
        report.checked["places"] = len(snapshot.places)
    return report

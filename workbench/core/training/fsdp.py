"""FSDP2 under torchrun: shard a model whose plan is already applied (``--strategy fsdp``).

The plan (freezing, BN eval, ``eval``, A+B full rank and low rank, activation checkpointing)
is applied to the full model first; then each block is ``fully_shard``-ed (:func:`block_paths`:
the repeated blocks of the model, such as the transformer layers of timm and Hugging Face
models or the residual blocks of a ResNet; the top-level children otherwise; ``fsdp_blocks``
patterns override it), then the root. FSDP2 keeps ``requires_grad`` per parameter, so frozen
and trainable parameters share a unit, and the optimizer, built after sharding, gets only the
trainable shards.

Refused with one line (:class:`FsdpError`): no torchrun process group, plan stages and live
plan changes (:data:`PLAN_CHANGE_REFUSED`: which parameters train cannot change once they are
sharded), sub-tensor freezing (``partial``), A+B in ``fused`` mode and ``--amp fp16``.

:class:`ShardVerifier` hashes each rank's local shards of the frozen tensors right after
sharding and compares them at the end; the ranks exchange their findings, so every rank
returns the same report. :func:`full_state_dict` gathers the full, unsharded state dict on CPU
(every rank takes part); :func:`plain_state_dict` merges A+B into plain weights so the
model's own library loads it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from workbench.core.atomic import atomic_path
from workbench.core.errors import WorkbenchError
from workbench.core.freezing.snapshot import Snapshot, VerifyReport, compare_in_force, model_tensors

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workbench.core.freezing.plan_handle import AppliedPlan
    from workbench.core.plan.rules import FreezePlan
    from workbench.core.training.distributed import DistContext

__all__ = [
    "PLAN_CHANGE_REFUSED",
    "FsdpError",
    "ShardVerifier",
    "block_paths",
    "check_plan_supported",
    "deltas_from_state",
    "full_state_dict",
    "local",
    "mixed_precision",
    "plain_state_dict",
    "require_group",
    "reshard",
    "resolve_blocks",
    "save_full",
    "shard_model",
    "sync_buffers",
]

#: Why a plan change is refused under FSDP (the plan event, and the setup error for stages).
PLAN_CHANGE_REFUSED = (
    "plan changes are not supported with --strategy fsdp (the parameters are sharded; which of "
    "them train cannot change); use --strategy ddp for plans with stages or live edits"
)
_PARAMETRIZED = ".parametrizations."


class FsdpError(WorkbenchError):
    """FSDP cannot be used as asked; the message says what to do."""


def require_group(ctx: DistContext | None) -> None:
    """Check that this process is one of several in a torchrun job (FSDP needs a process group).

    Args:
        ctx: the engine's process group context (None for a single process).

    Raises:
        FsdpError: a single process.
    """
    if ctx is None:
        raise FsdpError(
            "--strategy fsdp needs torchrun with 2 or more processes: run `torchrun --nproc_per_node N "
            "-m workbench train ... --strategy fsdp` (see docs/scaling.md)"
        )


def check_plan_supported(plan: FreezePlan, applied: AppliedPlan, amp: str, *, meta: bool = False) -> None:
    """Refuse what FSDP cannot run, before anything is sharded.

    Args:
        plan: the full plan (stages included).
        applied: the plan applied to the model (its installed extensions).
        amp: the config's ``amp``.
        meta: the model was built on the meta device (its weights are read after sharding).

    Raises:
        FsdpError: stages, sub-tensor freezing, A+B in fused mode (or on a model built on
            meta: A is taken from weights that are not read yet), or ``fp16``.
    """
    if plan.stages:
        raise FsdpError(f"the plan has {len(plan.stages)} stage(s): {PLAN_CHANGE_REFUSED}")
    partial = applied.installed("partial")
    if partial:
        raise FsdpError(
            f"sub-tensor freezing ('partial' on {sorted(partial)[0]!r}) is not supported with --strategy fsdp "
            "(its weight is two parameters FSDP would shard apart); use --strategy ddp or freeze whole tensors"
        )
    if meta and applied.installed("reparam"):
        raise FsdpError(
            "A+B needs the model's weights when it is installed, and this model is built on the meta device "
            "and read shard by shard after sharding; train without A+B under --strategy fsdp, or use --strategy ddp"
        )
    fused = sorted(p for p, h in applied.installed("reparam").items() if getattr(h, "mode", "exact") == "fused")
    if fused:
        raise FsdpError(
            f"A+B in mode 'fused' (on {fused[0]!r}) is not supported with --strategy fsdp; "
            "use \"mode\": \"exact\" in the reparam spec, or --strategy ddp"
        )
    if amp == "fp16":
        raise FsdpError("--amp fp16 is not supported with --strategy fsdp (no sharded gradient scaler); use --amp bf16")


def _holds_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters())


def _repeated(m: nn.Module) -> bool:
    """A list of two or more blocks of one class, each with parameters."""
    kids = list(m.children())
    return (
        isinstance(m, (nn.ModuleList, nn.Sequential))
        and len(kids) >= 2
        and len({type(k) for k in kids}) == 1
        and all(_holds_params(k) for k in kids)
    )


def block_paths(model: nn.Module) -> list[str]:
    """The modules to shard one by one: the children of the outermost lists of repeated blocks
    (transformer layers, residual stages), else the top-level children with parameters.

    Args:
        model: the model (plan applied).

    Returns:
        Dotted paths, in model order.
    """
    found: list[str] = []

    def walk(prefix: str, m: nn.Module) -> None:
        if _repeated(m):
            found.extend(f"{prefix}{n}" for n, _ in m.named_children())
            return
        for n, c in m.named_children():
            if n != "parametrizations":
                walk(f"{prefix}{n}.", c)

    walk("", model)
    if found:
        return found
    return [n for n, m in model.named_children() if _holds_params(m)]


def resolve_blocks(model: nn.Module, patterns: list[str] | None) -> list[str]:
    """The block paths to shard: :func:`block_paths`, or the modules matching ``patterns``.

    Args:
        model: the model.
        patterns: fnmatch patterns over module paths (``"layer*.*"``), or None. Each pattern
            gives its outermost matches (``"blocks.*"`` the blocks, not their layers); two
            patterns may nest units (``["layer4", "layer4.?"]``).

    Returns:
        Paths, deepest first (FSDP shards inner units before the units around them).

    Raises:
        FsdpError: a pattern matches no module with parameters.
    """
    if patterns is None:
        paths = block_paths(model)
    else:
        names = [n for n, m in model.named_modules() if n and _holds_params(m) and _PARAMETRIZED.strip(".") not in n.split(".")]
        paths = []
        for pat in patterns:
            hits = [n for n in names if fnmatch.fnmatchcase(n, pat)]
            # ``*`` crosses dots (as in plan selectors): a pattern's outermost matches only
            hits = [n for n in hits if not any(n.startswith(f"{h}.") for h in hits)]
            if not hits:
                raise FsdpError(f"fsdp_blocks pattern {pat!r} matches no module with parameters; give module paths such as 'layer1.0' or 'blocks.*'")
            paths += [h for h in hits if h not in paths]
    return sorted(paths, key=lambda p: -p.count("."))


def mixed_precision(amp: str) -> Any:
    """The FSDP2 mixed precision policy for ``--amp``.

    Args:
        amp: ``off`` or ``bf16`` (``fp16`` is refused by :func:`check_plan_supported`).

    Returns:
        A ``MixedPrecisionPolicy`` (bf16 parameters in forward and backward, gradients reduced
        in float32), or None for full precision.
    """
    if amp != "bf16":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def shard_model(model: nn.Module, device: torch.device, blocks: list[str], *, amp: str = "off") -> None:
    """``fully_shard`` each block, then the root, over the default process group.

    Args:
        model: the model, plan applied, on ``device``.
        device: this rank's device.
        blocks: paths to shard as units (deepest first, see :func:`resolve_blocks`).
        amp: ``off`` or ``bf16`` (see :func:`mixed_precision`); with ``bf16`` each BatchNorm
            with parameters is a float32 unit of its own (the engine's autocast casts the
            inputs of the layers after it back to bf16).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    kwargs: dict[str, Any] = {"mesh": mesh}
    mp = mixed_precision(amp)
    units = [(p, kwargs) for p in blocks]
    if mp is not None:
        kwargs["mp_policy"] = mp
        # BatchNorm keeps float32 parameters beside its float32 running statistics (batch_norm
        # refuses bf16 weights with float32 statistics): a unit of its own, inputs cast to float32
        fp32 = {"mesh": mesh, "mp_policy": type(mp)(param_dtype=torch.float32, reduce_dtype=torch.float32)}
        bns = [n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and _holds_params(m)]
        units = sorted(units + [(n, fp32) for n in bns], key=lambda u: -u[0].count("."))
    for p, kw in units:
        fully_shard(model.get_submodule(p), **kw)
    fully_shard(model, **kwargs)


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a sharded tensor (a ``DTensor``); a plain tensor as it is."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _current(applied: AppliedPlan, model: nn.Module) -> dict[str, dict[str, torch.Tensor]]:
    """The plan's categories by name, with the model's tensors as they are now (sharding
    replaced the parameter objects), as this rank's local shards."""
    now = model_tensors(model)
    cats = applied._categories()
    fixed = set(cats.get("fixed", {}))
    out: dict[str, dict[str, torch.Tensor]] = {}
    for category, tensors in cats.items():
        keep = {n: now.get(n, t) for n, t in tensors.items() if category == "fixed" or n not in fixed}
        out[category] = {n: local(t) for n, t in keep.items()}
    return out


class ShardVerifier:
    """Frozen tensors bit-identical, checked on each rank's shards; every rank gets the same report.

    Create it right after sharding (the baseline is this rank's shards then).

    Attributes:
        model: the sharded model.

    Args:
        applied: the applied plan (its categories: frozen, fixed, BN statistics, trainable).
        model: the sharded model.
    """

    def __init__(self, applied: AppliedPlan, model: nn.Module) -> None:
        self._applied = applied
        self.model = model
        self._snapshot = Snapshot()
        owner = applied.tree.owner_of
        for category, tensors in _current(applied, model).items():
            self._snapshot.record(
                category, ((n, n.rpartition(".")[0] if category == "bn_stats" else owner(n), t) for n, t in tensors.items())
            )
        self._snapshot.record_places(model)  # the sharded parameters: FSDP keeps them between steps

    def verify(self) -> VerifyReport:
        """Compare this rank's shards with the baseline and merge every rank's findings (a collective).

        Returns:
            The merged report (the same on every rank): a violation found on rank r > 0 says so.
        """
        flat = {n: t for ts in _current(self._applied, self.model).values() for n, t in ts.items()}
        quiet = {
            f"{path}.{short}" if path else short
            for path, node in self._applied.tree.nodes.items() if node.is_bn for short in node.param_names
        }
        mine = compare_in_force(self._snapshot, flat, quiet=quiet, model=self.model)
        reports: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(reports, mine)
        return merge_reports(reports)


def merge_reports(reports: list[VerifyReport]) -> VerifyReport:
    """One report from every rank's report of its own shards.

    Args:
        reports: by rank.

    Returns:
        Rank 0's counts; every rank's violations once (those found only on rank r > 0 say so);
        the worst status per module.
    """
    out = VerifyReport()
    out.checked = dict(reports[0].checked)
    seen: set[tuple[str, str]] = set()
    rank_order = {"ok": 0, "warning": 1, "error": 2}
    for rank, r in enumerate(reports):
        for v in r.violations:
            if (v.name, v.kind) in seen:
                continue
            seen.add((v.name, v.kind))
            out.violations.append(v if rank == 0 else replace(v, message=f"{v.message} (in rank {rank}'s shard)"))
        for module, status in r.module_status.items():
            if rank_order.get(status, 0) >= rank_order.get(out.module_status.get(module, "ok"), 0):
                out.module_status[module] = status
    return out


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full, unsharded state dict on CPU. Every rank must call it (it gathers).

    Args:
        model: the sharded model.

    Returns:
        ``{name: tensor}`` with the names of ``model.state_dict()`` on rank 0; empty on the
        other ranks (``cpu_offload`` keeps the full tensors on rank 0 only).
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


def _parametrized(state: Mapping[str, torch.Tensor]) -> dict[str, tuple[str, str]]:
    """``{prefix "X.parametrizations.weight": (module path "X", tensor name "weight")}``."""
    out: dict[str, tuple[str, str]] = {}
    for k in state:
        if _PARAMETRIZED in f".{k}" and k.endswith(".original"):
            prefix = k[: -len(".original")]
            owner, _, rest = f".{prefix}".rpartition(_PARAMETRIZED)
            out[prefix] = (owner[1:], rest)
    return out


def _delta(model: nn.Module, prefix: str, state: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
    """B of one parametrized tensor from full tensors: full rank ``original``; low rank ``s U V``."""
    if f"{prefix}.0.A" in state:
        return state[f"{prefix}.original"]
    u, v = state.get(f"{prefix}.0.U"), state.get(f"{prefix}.0.V")
    if u is None or v is None:
        return None
    par: Any = model.get_submodule(f"{prefix}.0")
    return par.geometry.to_weight((u.float() @ v.float()) * par.scale).to(state[f"{prefix}.original"].dtype)


def deltas_from_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every B of A+B (exact mode) from a full state dict, keyed by parameter path as
    :func:`~workbench.core.freezing.reparam.ops.export_deltas` writes them.

    Args:
        model: the model (for the low-rank scale and layout).
        state: the full state dict (:func:`full_state_dict`).

    Returns:
        ``{"layer4.0.conv1.weight": B}``; empty without A+B.
    """
    out: dict[str, torch.Tensor] = {}
    for prefix, (owner, name) in _parametrized(state).items():
        b = _delta(model, prefix, state)
        if b is not None:
            out[f"{owner}.{name}" if owner else name] = b.contiguous()
    return out


def plain_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict with A+B merged into plain weights (``W = A + B``), as the model's own
    library names them, so ``load_state_dict`` of a fresh model takes it.

    Args:
        model: the model (for the low-rank scale and layout).
        state: the full state dict (:func:`full_state_dict`).

    Returns:
        ``{name: tensor}`` without ``parametrizations`` keys.
    """
    parts = _parametrized(state)
    out = {k: v for k, v in state.items() if not any(k.startswith(f"{p}.") for p in parts)}
    for prefix, (owner, name) in parts.items():
        a = state[f"{prefix}.0.A"] if f"{prefix}.0.A" in state else state[f"{prefix}.original"]
        b = _delta(model, prefix, state)
        out[f"{owner}.{name}" if owner else name] = (a + b if b is not None else a).contiguous()
    return out


def save_full(model: nn.Module, state: Mapping[str, torch.Tensor], folder: Path) -> list[str]:
    """Write ``model.safetensors`` (the plain, unsharded model: :func:`plain_state_dict`) and,
    with A+B, ``deltas.safetensors`` (every B, as ``export_deltas`` writes it).

    Args:
        model: the sharded model (for the low-rank scale and layout).
        state: the full state dict (:func:`full_state_dict`, on rank 0).
        folder: the run folder.

    Returns:
        The file names written.
    """
    from safetensors.torch import save_file

    from workbench.core.freezing.reparam import DELTA_FORMAT
    from workbench.core.plan.reparam_spec import KIND

    written = []
    for name, tensors, meta in (
        ("model.safetensors", plain_state_dict(model, state), {"format": "pt"}),
        ("deltas.safetensors", deltas_from_state(model, state),
         {"format": DELTA_FORMAT, "version": "1", "kind": KIND, "mode": "exact"}),
    ):
        if not tensors:
            continue
        seen: set[int] = set()
        out = {}
        for k, v in tensors.items():  # tied weights are one tensor under two names: write each
            v = v.contiguous()
            out[k] = v.clone() if v.data_ptr() in seen else v
            seen.add(v.data_ptr())
        with atomic_path(folder / name) as tmp:
            save_file(out, str(tmp), metadata=meta)
        written.append(name)
    return written


def sync_buffers(model: nn.Module) -> None:
    """Give every rank rank 0's buffers (BatchNorm running statistics), as DDP does before each
    forward. FSDP2 shards parameters only; a BatchNorm that trains updates its running
    statistics from each rank's own batches. Training forwards use batch statistics, so
    copying rank 0's before validation and at the end gives what DDP gives. A collective.

    Args:
        model: the sharded model.
    """
    with torch.no_grad():
        for b in model.buffers():
            dist.broadcast(local(b), src=0)


def reshard(model: nn.Module) -> None:
    """Free every unit's gathered parameters (FSDP2 keeps the root's gathered after a forward
    without backward, such as validation).

    Args:
        model: the sharded model.
    """
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()

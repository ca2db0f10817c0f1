"""Where A and the initial B come from: the loaded weights, zeros, a seeded draw or a safetensors file."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor

from workbench.core.freezing.reparam.base import derived_seed
from workbench.core.plan.reparam_spec import ReparamError, Source
from workbench.core.suggest import close_matches

__all__ = ["Sources", "TensorFile", "random_like"]


def random_like(w: Tensor, r: Source, role: str, key: str) -> Tensor:
    """A seeded random tensor shaped like ``w`` (drawn on the CPU: the same on every device).

    Args:
        w: the weight it stands for.
        r: a ``random`` source (seed, dist, scale).
        role: ``"a"`` or ``"b"``.
        key: the parameter path (part of the seed).

    Returns:
        The tensor on ``w``'s device and dtype.
    """
    g = torch.Generator(device="cpu").manual_seed(derived_seed(r.seed, role, key))
    fn = torch.rand if r.dist == "uniform" else torch.randn
    t = fn(tuple(w.shape), generator=g, dtype=torch.float32)
    if r.scale != 1.0:
        t.mul_(r.scale)
    return t.to(device=w.device, dtype=w.dtype)


def _resolve(file: str, base_dir: Path | None) -> Path:
    p = Path(file).expanduser()
    if not p.is_absolute():
        p = (base_dir or Path.cwd()) / p
    return p


class TensorFile:
    """A safetensors file opened lazily, with errors that name the file and the parameter.

    Args:
        path: the file.
        role: what it holds, for messages (``"A"``, ``"B"``, ``"deltas"``).

    Raises:
        ReparamError: the file is missing or not safetensors.
    """

    def __init__(self, path: Path, role: str) -> None:
        self.path = path
        self.role = role
        if not path.is_file():
            raise ReparamError(
                f"{role} file {str(path)!r} not found; give a path relative to the plan file's folder "
                "(or to base_dir) or an absolute path"
            )
        try:
            self._f = safe_open(str(path), framework="pt", device="cpu")
            self.keys: set[str] = set(self._f.keys())  # type: ignore[no-untyped-call]
        except Exception as e:  # safetensors raises its own error type for a bad header
            raise ReparamError(
                f"{role} file {str(path)!r} is not a readable safetensors file ({e}); write it with "
                "applied.export_deltas() or safetensors.torch.save_file({parameter path: tensor})"
            ) from None

    def tensor(self, key: str, like: Tensor) -> Tensor:
        """The tensor for parameter ``key``, checked against ``like`` and cast to its dtype/device.

        Args:
            key: the parameter path.
            like: the parameter it is for.

        Returns:
            The tensor.

        Raises:
            ReparamError: no such key (the closest is named), another shape, not floating point.
        """
        if key not in self.keys:
            hint = close_matches(key, sorted(self.keys))
            near = f"; closest key: {hint[0]!r}" if hint else (
                f"; it holds {len(self.keys)} tensors" + (f" such as {sorted(self.keys)[0]!r}" if self.keys else "")
            )
            raise ReparamError(
                f"{self.role} file {str(self.path)!r} has no tensor for parameter {key!r}{near}; "
                "key tensors by the parameter path of the plain model (as model.named_parameters() names it)"
            )
        shape = tuple(self._f.get_slice(key).get_shape())  # type: ignore[no-untyped-call]
        if shape != tuple(like.shape):
            raise ReparamError(
                f"tensor {key!r} in {self.role} file {str(self.path)!r} has shape {shape} but parameter "
                f"{key!r} has shape {tuple(like.shape)}; the file was made for a different model or head size"
            )
        t: Tensor = self._f.get_tensor(key)  # type: ignore[no-untyped-call]
        if not t.is_floating_point():
            raise ReparamError(
                f"tensor {key!r} in {self.role} file {str(self.path)!r} has dtype {t.dtype}; A+B needs "
                "floating-point tensors"
            )
        return t.to(device=like.device, dtype=like.dtype)


class Sources:
    """Builds A and B tensors for one install, opening each file once.

    Args:
        base_dir: folder for relative file paths (None: the working directory).
    """

    def __init__(self, base_dir: Path | None) -> None:
        self.base_dir = base_dir
        self._files: dict[tuple[Path, str], TensorFile] = {}

    def file(self, name: str, role: str) -> TensorFile:
        """The file ``name`` (resolved against ``base_dir``), opened once per role."""
        p = _resolve(name, self.base_dir)
        f = self._files.get((p, role))
        if f is None:
            f = self._files[(p, role)] = TensorFile(p, role)
        return f

    def make(self, src: Source, role: str, key: str, w: Tensor) -> Tensor:
        """The tensor for ``src`` (current, zeros, random or file) shaped like ``w``.

        Args:
            src: the source.
            role: ``"a"`` or ``"b"``.
            key: the parameter path.
            w: the parameter.

        Returns:
            A new tensor on ``w``'s device and dtype.

        Raises:
            ReparamError: a file is missing or does not fit.
        """
        with torch.no_grad():
            if src.kind == "current":
                return w.detach().clone()
            if src.kind == "zeros":
                return torch.zeros_like(w, memory_format=torch.contiguous_format)
            if src.kind == "random":
                return random_like(w, src, role, key)
            return self.file(str(src.file), "A" if role == "a" else "B").tensor(key, w)

"""Source text of the exported script's low-rank A+B (LoRA, DoRA) and sub-tensor freezing.

Plain PyTorch, no PEFT: each block mirrors the workbench's own installer step for step, so the
script trains what the workbench trains, with the same parameter names:

- :data:`LOW_RANK_CODE` mirrors :mod:`workbench.core.freezing.reparam.low_rank` and
  :mod:`workbench.core.freezing.reparam.dora`: ``U`` (out x r) zero, ``V`` (r x in) drawn
  from the same seeded generator (``V`` zero and ``U`` normal for embeddings), the scale
  ``alpha / rank``; exact mode is a :mod:`torch.nn.utils.parametrize` parametrization
  (``<layer>.parametrizations.weight.0.U``), fused mode a ``wb_lowrank`` child and a forward
  hook (``<layer>.wb_lowrank.weight.U``); DoRA adds ``M``, the magnitude per output channel.
  ``A`` and the layer's other parameters (its bias) never train.
- :data:`PARTIAL_CODE` mirrors :mod:`workbench.core.freezing.partial`: the weight is stored as
  ``weight_trainable`` and ``weight_frozen`` and the layer computes with the two separately,
  so the frozen part gets no gradient, no weight decay and no momentum.

The differential test in ``tests/core/export`` trains both and compares every step's loss.
"""

from __future__ import annotations

__all__ = ["LOW_RANK_CODE", "LOW_RANK_INSTALL", "PARTIAL_CODE"]

LOW_RANK_CODE = '''

def low_rank_kind(module: nn.Module) -> str | None:
    """The layers low-rank A+B adapts: linear, conv (Conv1d, Conv2d), conv1d_hf (transformers' Conv1D,
    weight stored in x out) and embedding (rows are inputs); None for any other module."""
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, (nn.Conv1d, nn.Conv2d)):
        return "conv"
    if isinstance(module, nn.Embedding):
        return "embedding"
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):
        return "conv1d_hf"
    return None


class LowRank(nn.Module):
    """B = (alpha / rank) U V for one weight: U (out x r) and V (r x in) train; DoRA adds M (one magnitude
    per output channel) and uses W = M (A + s U V) / ||A + s U V||, the norm a constant in backward.

    Exact mode: the weight's parametrization (forward(A) is the weight). Fused mode: the weight stays A and
    low_rank_hook adds the low-rank path to the layer's output."""

    def __init__(self, u: torch.Tensor, v: torch.Tensor, scale: float, kind: str, shape: tuple, dora: bool) -> None:
        super().__init__()
        self.U = nn.Parameter(u)
        self.V = nn.Parameter(v)
        self.scale, self.kind, self.shape, self.dora = scale, kind, shape, dora

    def flat(self, w: torch.Tensor) -> torch.Tensor:
        """The weight as the (out x in) matrix of U V."""
        return w.t() if self.kind in ("conv1d_hf", "embedding") else w.reshape(self.U.shape[0], self.V.shape[1])

    def unflat(self, m: torch.Tensor) -> torch.Tensor:
        """The (out x in) matrix in the weight's shape."""
        return m.t() if self.kind in ("conv1d_hf", "embedding") else m.view(self.shape)

    def norm(self, a: torch.Tensor) -> torch.Tensor:
        """DoRA: ||A + s U V|| per output channel, without a graph."""
        with torch.no_grad():
            return torch.linalg.vector_norm(torch.addmm(self.flat(a), self.U, self.V, alpha=self.scale), dim=1)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        """The weight the layer uses (exact mode)."""
        if self.dora:
            w = torch.addmm(self.flat(a), self.U, self.V, alpha=self.scale)
            return self.unflat(w * (self.M / self.norm(a)).unsqueeze(1))
        if self.kind in ("conv1d_hf", "embedding"):  # the weight is (U V)^T: in x out
            return torch.addmm(a, self.V.t(), self.U.t(), alpha=self.scale)
        return torch.addmm(a.reshape(self.U.shape[0], self.V.shape[1]), self.U, self.V, alpha=self.scale).view(self.shape)


def low_rank_path(module: nn.Module, d: LowRank, x: torch.Tensor, drop: float) -> torch.Tensor:
    """U (V x) for the layer's input x, without building U V (unscaled); dropout on x in training."""
    if d.kind == "embedding":
        h = F.embedding(x, d.V.t(), module.padding_idx, module.max_norm, module.norm_type, module.scale_grad_by_freq,
                        module.sparse)
        return F.linear(h, d.U)
    if drop and module.training:
        x = F.dropout(x, drop, training=True)
    if d.kind in ("linear", "conv1d_hf"):
        return F.linear(F.linear(x, d.V), d.U)
    nd = len(d.shape) - 2
    conv = F.conv1d if nd == 1 else F.conv2d
    h = conv(x, d.V.view(d.V.shape[0], *d.shape[1:]), None, module.stride, module.padding, module.dilation)
    return conv(h, d.U.view(*d.U.shape, *([1] * nd)))


def low_rank_hook(d: LowRank, drop: float):
    """Fused mode's forward hook: the layer's output (weight A) plus the low-rank path (DoRA: rescaled)."""

    def hook(module: nn.Module, args, out: torch.Tensor) -> torch.Tensor:
        x = args[0]
        if not d.dora:
            return torch.add(out, low_rank_path(module, d, x, drop), alpha=d.scale)
        a = module.weight
        shape = [1] * out.dim()
        shape[-1 if d.kind in ("linear", "conv1d_hf") else 1] = -1
        k = (d.M / d.norm(a)).view(shape)
        bias = getattr(module, "bias", None)
        if drop and module.training:
            x = F.dropout(x, drop, training=True)
            plain = module._conv_forward(x, a, None) if d.kind == "conv" else F.linear(x, a if d.kind == "linear" else a.t())
        else:
            plain = out if bias is None else out - bias.view(shape)
        return out + (k - 1) * plain + k * d.scale * low_rank_path(module, d, x, 0.0)

    return hook


def add_low_rank(module: nn.Module, path: str, spec: dict) -> None:
    """Low-rank A+B on the weight of one supported layer; A (the weight) and the layer's other parameters
    are held fixed (FIXED)."""
    kind = low_rank_kind(module)
    w = module._parameters.get("weight")
    if kind is None or w is None:
        return
    key = f"{path}.weight" if path else "weight"
    shape = tuple(w.shape)
    out, inp = (shape[1], shape[0]) if kind in ("conv1d_hf", "embedding") else (shape[0], math.prod(shape[1:]))
    rank = spec["rank"]
    seed = (0 * 0x9E3779B97F4A7C15 + zlib.crc32(f"lowrank:{key}".encode())) % (2**63 - 1)
    g = torch.Generator(device="cpu").manual_seed(seed)
    u = torch.zeros(out, rank, dtype=torch.float32)
    v = torch.zeros(rank, inp, dtype=torch.float32)
    if kind == "embedding":  # as PEFT: V zero, U normal
        u.normal_(0.0, 1.0, generator=g)
    elif spec["init"] == "gaussian":
        v.normal_(0.0, 1.0 / rank, generator=g)
    else:  # kaiming: V as PEFT draws lora_A
        nn.init.kaiming_uniform_(v, a=math.sqrt(5), generator=g)
    a = make_tensor(spec["a"], "a", key, w)
    FIXED.update(id(p) for p in module.parameters(recurse=False))
    with torch.no_grad():
        w.copy_(a)
    d = LowRank(u.to(w.device, w.dtype), v.to(w.device, w.dtype), spec["alpha"] / rank, kind, shape,
                spec.get("variant") == "dora")
    if d.dora:
        d.M = nn.Parameter(d.norm(w))
    if spec["mode"] == "exact":
        parametrize.register_parametrization(module, "weight", d, unsafe=True)
    else:
        child = nn.ModuleDict()
        module.add_module("wb_lowrank", child)
        child["weight"] = d
        module.register_forward_hook(low_rank_hook(d, spec["dropout"]))
'''

#: The line of ``add_a_plus_b`` that sends low-rank entries to ``add_low_rank``.
LOW_RANK_INSTALL = '''            if "rank" in spec:
                add_low_rank(module, path, spec)
                continue
'''

PARTIAL_CODE = '''

def take(t: torch.Tensor, dim: int, ranges: list) -> torch.Tensor:
    """The half-open ranges [start, stop) of t along dim, side by side."""
    if len(ranges) == 1:
        a, b = ranges[0]
        return t.narrow(dim, a, b - a)
    return torch.cat([t.narrow(dim, a, b - a) for a, b in ranges], dim)


class PartialWeight:
    """A layer whose weight is two parameters: weight_trainable (the ranges of PARTIAL along dim) and
    weight_frozen (the rest, in FIXED). It computes with the two separately, so the frozen part gets no
    gradient, no weight decay and no momentum; .weight puts the full tensor together (read-only)."""

    @property
    def weight(self) -> torch.Tensor:
        return self.assemble(self.weight_trainable, self.weight_frozen, self.partial_dim)

    def assemble(self, t_part: torch.Tensor, f_part: torch.Tensor, dim: int) -> torch.Tensor:
        """Trainable and frozen parts (of the weight, or of an output) in the order of the full tensor."""
        return torch.cat([(t_part if tr else f_part).narrow(dim, off, n) for tr, off, n in self.segments], dim)

    def parts(self, t: torch.Tensor, dim: int) -> tuple:
        return take(t, dim, self.trainable_ranges), take(t, dim, self.frozen_ranges)


class PartialLinear(PartialWeight, nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wt, wf, bias = self.weight_trainable, self.weight_frozen, self.bias
        if self.partial_dim == 1:  # input columns: two products summed, the bias with the trainable one
            xt, xf = self.parts(x, -1)
            return F.linear(xt, wt, bias) + F.linear(xf, wf)
        bt, bf = (None, None) if bias is None else self.parts(bias, 0)
        return self.assemble(F.linear(x, wt, bt), F.linear(x, wf, bf), -1)


class PartialConv(PartialWeight):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channel = x.dim() - len(self.kernel_size) - 1
        wt, wf, bias = self.weight_trainable, self.weight_frozen, self.bias
        if self.partial_dim == 1:  # input channels
            xt, xf = self.parts(x, channel)
            return self._conv_forward(xt, wt, bias) + self._conv_forward(xf, wf, None)
        bt, bf = (None, None) if bias is None else self.parts(bias, 0)
        return self.assemble(self._conv_forward(x, wt, bt), self._conv_forward(x, wf, bf), channel)


class PartialConv1d(PartialConv, nn.Conv1d):
    pass


class PartialConv2d(PartialConv, nn.Conv2d):
    pass


class PartialConv3d(PartialConv, nn.Conv3d):
    pass


class PartialEmbedding(PartialWeight, nn.Embedding):
    """Rows (dim 0): each id is looked up in the table it lives in; columns (dim 1): both tables, side by side."""

    def lookup(self, idx: torch.Tensor, table: torch.Tensor, padding_idx) -> torch.Tensor:
        return F.embedding(idx, table, padding_idx, None, self.norm_type, self.scale_grad_by_freq, self.sparse)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wt, wf = self.weight_trainable, self.weight_frozen
        if self.partial_dim == 1:
            return self.assemble(self.lookup(x, wt, self.padding_idx), self.lookup(x, wf, None), -1)
        pos, is_t, t_pad = self.row_pos[x], self.row_trainable[x], self.trainable_padding
        out = F.embedding(torch.where(is_t, 0, pos), wf)
        if not (wt.requires_grad and torch.is_grad_enabled()):
            return torch.where(is_t.unsqueeze(-1), F.embedding(torch.where(is_t, pos, 0), wt), out)
        if self.sparse or self.scale_grad_by_freq:  # exactly the trainable positions
            flat = is_t.reshape(-1).nonzero().squeeze(1)
            rows = self.lookup(pos.reshape(-1).index_select(0, flat), wt, t_pad)
            return out.reshape(-1, out.shape[-1]).index_put((flat,), rows).reshape(out.shape)
        rows = self.lookup(torch.where(is_t, pos, 0 if t_pad is None else t_pad), wt, t_pad)
        return torch.where(is_t.unsqueeze(-1), rows, out)


PARTIAL_CLASSES = {nn.Linear: PartialLinear, nn.Conv1d: PartialConv1d, nn.Conv2d: PartialConv2d,
                   nn.Conv3d: PartialConv3d, nn.Embedding: PartialEmbedding}


def add_partial(model: nn.Module, entries: list[tuple[str, dict]]) -> None:
    """Sub-tensor freezing: the weight of each listed layer becomes weight_trainable (the ranges along dim)
    and weight_frozen (the rest, held fixed); the layer's class becomes its Partial* subclass."""
    for path, spec in entries:
        module = model.get_submodule(path)
        w, dim, ranges = module._parameters.pop("weight"), spec["dim"], [tuple(r) for r in spec["trainable"]]
        size, frozen, segments, pos, t_off, f_off = w.shape[dim], [], [], 0, 0, 0
        for a, b in ranges:
            if a > pos:
                frozen.append((pos, a))
                segments.append((False, f_off, a - pos))
                f_off += a - pos
            segments.append((True, t_off, b - a))
            t_off, pos = t_off + b - a, b
        if pos < size:
            frozen.append((pos, size))
            segments.append((False, f_off, size - pos))
        with torch.no_grad():
            wt = take(w.detach(), dim, ranges).contiguous().clone()
            wf = take(w.detach(), dim, frozen).contiguous().clone()
        had_bias, bias = "bias" in module._parameters, module._parameters.pop("bias", None)
        module.weight_trainable = nn.Parameter(wt, requires_grad=w.requires_grad)
        module.weight_frozen = nn.Parameter(wf, requires_grad=False)
        if had_bias:  # the workbench's order: weight_trainable, weight_frozen, bias
            module._parameters["bias"] = bias
        FIXED.add(id(module.weight_frozen))
        module.partial_dim, module.segments = dim, segments
        module.trainable_ranges, module.frozen_ranges = ranges, frozen
        if isinstance(module, nn.Embedding) and dim == 0:
            is_t = torch.zeros(size, dtype=torch.bool, device=w.device)
            rows = torch.empty(size, dtype=torch.long, device=w.device)
            start = 0
            for tr, off, n in segments:  # each row of the full table: its table and its row there
                rows[start:start + n] = torch.arange(off, off + n, device=w.device)
                is_t[start:start + n] = tr
                start += n
            module.register_buffer("row_pos", rows, persistent=False)
            module.register_buffer("row_trainable", is_t, persistent=False)
            pad = module.padding_idx
            module.trainable_padding = int(rows[pad]) if pad is not None and bool(is_t[pad]) else None
        module.__class__ = PARTIAL_CLASSES[type(module)]
'''

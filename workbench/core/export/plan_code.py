"""Source text of the exported script's plan functions: settings tables, eval locks, param
groups, A+B and the applied-state description.

Each constant is a block of the script; :mod:`workbench.core.export.script` puts them together.
They mirror :mod:`workbench.core.freezing.plan_handle` (eval lock, param groups) and
:mod:`workbench.core.freezing.reparam` (A+B) in plain PyTorch.
"""

from __future__ import annotations

__all__ = [
    "APLUSB_CODE",
    "DESCRIBE_CODE",
    "FILE_BRANCH",
    "FREEZE_CODE",
    "FUSED_CODE",
    "INSTALL_CODE",
    "INSTALL_EXACT_ONLY",
    "INSTALL_WITH_FUSED",
    "RANDOM_BRANCH",
    "SOURCE_CODE",
]

FREEZE_CODE = '''

# ids of the tensors that never train: A of low-rank A+B and the other parameters of its layer, the frozen
# part of a partly frozen weight (requires_grad stays False whatever the tables say)
FIXED: set[int] = set()
NO_DECAY_AUTO = {no_decay_auto}  # no weight decay for 1-D tensors (biases, norms, DoRA's magnitudes)


def canonical(param_name: str) -> str:
    """Name of a parameter in the plain model: ``conv.parametrizations.weight.original`` (A+B) and
    ``fc.parametrizations.weight.0.U`` or ``fc.wb_lowrank.weight.U`` (low-rank A+B) -> ``conv.weight``, ``fc.weight``."""
    parts = param_name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in ("parametrizations", "wb_lowrank"):
            return ".".join(parts[:i] + [parts[i + 1]])
    return param_name


def under(name: str, prefix: str) -> bool:
    """Whether a module path or parameter name is ``prefix`` or inside it (``""`` is the whole model);
    a prefix with ``*`` is a pattern on the whole name (``"*.bias"``: every bias)."""
    if "*" in prefix:
        return fnmatch.fnmatchcase(name, prefix)
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def setting_of(name: str, table: list[tuple[str, object]], default):
    """Value of a module path or parameter name in a table: the last entry it is under wins."""
    value = default
    for prefix, v in table:
        if under(name, prefix):
            value = v
    return value


def set_requires_grad(model: nn.Module, table: list[tuple[str, bool]]) -> None:
    """``requires_grad`` of each parameter from the table (module prefixes, then single parameters)."""
    for name, param in model.named_parameters():
        param.requires_grad_(id(param) not in FIXED and setting_of(canonical(name), table, True))


def _train_keeping_eval(self: nn.Module, mode: bool = True) -> nn.Module:
    """``train()`` of a module kept in eval mode: always eval (its children too)."""
    nn.Module.train(self, False)
    return self


def set_eval(model: nn.Module, eval_table: list[tuple[str, bool]], bn_prefixes: list[str]) -> None:
    """Keep modules in eval mode, even after ``model.train()``: those the eval table marks, and the
    BatchNorm modules under ``bn_prefixes``.

    Their ``train`` is overridden on the instance, so a later ``model.train()`` cannot put them
    back in train mode (Dropout stays off, BatchNorm statistics stay as loaded). Others are released.
    """
    modules = dict(model.named_modules())
    for path, module in modules.items():
        is_bn = isinstance(module, nn.modules.batchnorm._BatchNorm)
        want = setting_of(path, eval_table, False) or (is_bn and any(under(path, p) for p in bn_prefixes))
        locked = "train" in module.__dict__
        if want:
            if not locked:
                object.__setattr__(module, "train", types.MethodType(_train_keeping_eval, module))
            nn.Module.train(module, False)
        elif locked:
            object.__delattr__(module, "train")
            parent = modules[path.rpartition(".")[0]] if path else model
            nn.Module.train(module, parent.training if path else model.training)


def apply_settings(model: nn.Module, settings: dict) -> None:
    """requires_grad and eval-mode locks of the base plan or of one stage."""
    set_requires_grad(model, settings["requires_grad"])
    set_eval(model, settings["eval"], settings["bn_eval"])


def param_groups(model: nn.Module, lr: float, weight_decay: float, settings: dict) -> list[dict]:
    """Trainable parameters only, each once, one group per (learning-rate multiplier, weight decay),
    largest first. A weight decay of None in the table means ``weight_decay``."""
    groups: dict[tuple[float, float], dict] = {}
    seen: set[int] = set()
    for name, param in model.named_parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))
        key = canonical(name)
        scale = setting_of(key, settings["lr_scales"], 1.0)
        decay = setting_of(key, settings["weight_decays"], None)
        decay = 0.0 if NO_DECAY_AUTO and param.ndim <= 1 else weight_decay if decay is None else decay
        group = groups.setdefault((scale, decay), {"params": [], "param_names": [], "lr": lr * scale,
                                                   "lr_scale": scale, "weight_decay": decay})
        group["params"].append(param)
        group["param_names"].append(name)
    out = [groups[k] for k in sorted(groups, key=lambda k: (-k[0], -k[1]))]
{adjust_call}    return out
'''

DESCRIBE_CODE = '''

def describe(model: nn.Module, groups: list[dict]) -> dict:
    """The applied state, as JSON-ready data (compare it with `workbench inspect --plan`)."""
    was = model.training
    model.train()  # modules kept in eval must stay in eval
    modes = {p: m.training for p, m in model.named_modules()}
    bn_eval = [p for p, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.training]
    model.train(was)
    params = dict(model.named_parameters())
    return {
        "trainable": [n for n, p in params.items() if p.requires_grad],
        "trainable_count": sum(p.numel() for p in params.values() if p.requires_grad),
        "total_count": sum(p.numel() for p in params.values()),
        "bn_eval": bn_eval,
        "eval": [p for p, training in modes.items() if not training],
        "groups": [{k: v for k, v in g.items() if k != "params"} for g in groups],
    }
'''

APLUSB_CODE = '''

class APlusB(nn.Module):
    """Parametrization ``W = A + B``: A is a fixed buffer, B (the parametrization's ``original``) trains."""

    def __init__(self, a: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("A", a, persistent=True)

    def forward(self, b: torch.Tensor) -> torch.Tensor:
        return self.A + b

    def right_inverse(self, w: torch.Tensor) -> torch.Tensor:
        return w - self.A
'''


SOURCE_CODE = '''

def make_tensor(source, role: str, key: str, like: torch.Tensor) -> torch.Tensor:
    """A or B for parameter ``key``: "current", "zeros", {{"random": ...}} or {{"file": ...}}."""
    with torch.no_grad():
        if source == "current":
            return like.detach().clone()
        if source == "zeros":
            return torch.zeros_like(like, memory_format=torch.contiguous_format)
{random_branch}{file_branch}    raise ValueError(f"unknown A/B source {{source!r}} for {{key}}")
'''


RANDOM_BRANCH = '''        if "random" in source:  # the seeded generator of Freeze Workbench: same A/B as the app
            r = source["random"]
            seed = (r["seed"] * 0x9E3779B97F4A7C15 + zlib.crc32(f"{role}:{key}".encode())) % (2**63 - 1)
            g = torch.Generator(device="cpu").manual_seed(seed)
            fn = torch.rand if r["dist"] == "uniform" else torch.randn
            t = fn(tuple(like.shape), generator=g, dtype=torch.float32)
            if r["scale"] != 1.0:
                t.mul_(r["scale"])
            return t.to(device=like.device, dtype=like.dtype)
'''


FILE_BRANCH = '''        if "file" in source:
            from safetensors.torch import load_file

            path = Path(source["file"])
            tensors = _FILES.setdefault(str(path), load_file(str(path if path.is_absolute() else HERE / path)))
            return tensors[key].to(device=like.device, dtype=like.dtype)
'''


INSTALL_CODE = '''

def add_a_plus_b(model: nn.Module, entries: list[tuple[str, dict]]) -> None:
    """W = A + B on the parameters of every module under each prefix (A fixed, B trained)."""
    for prefix, spec in entries:
        for path, module in list(model.named_modules()):
            if not under(path, prefix) or {"parametrizations", "wb_lowrank"} & set(path.split(".")):
                continue
{low_rank_install}            names = [n for n, _ in module.named_parameters(recurse=False) if not spec["params"] or n in spec["params"]]
            for name in names:
                weight = getattr(module, name)
                key = f"{path}.{name}" if path else name
                a = make_tensor(spec["a"], "a", key, weight)
                b = make_tensor(spec["b_init"], "b", key, weight)
{install_modes}'''


INSTALL_EXACT_ONLY = '''                parametrize.register_parametrization(module, name, APlusB(a))
                with torch.no_grad():
                    module.parametrizations[name].original.copy_(b)
'''


INSTALL_WITH_FUSED = '''                if spec["mode"] == "exact":
                    parametrize.register_parametrization(module, name, APlusB(a))
                    with torch.no_grad():
                        module.parametrizations[name].original.copy_(b)
                else:  # fused: train W itself; weight decay pulls W toward A (see fused_decay)
                    if not (spec["a"] == "current" and spec["b_init"] == "zeros"):
                        with torch.no_grad():
                            weight.copy_(a + b)
                    FUSED_A[id(weight)] = a
'''


FUSED_CODE = '''

# fused A+B: id of parameter W -> its fixed A (weight decay acts on B = W - A)
FUSED_A: dict[int, torch.Tensor] = {}


def split_fused_groups(groups: list[dict], weight_decay: float) -> list[dict]:
    """Fused A+B parameters get their own groups: no plain weight decay, decay toward A instead."""
    if not FUSED_A or not weight_decay:
        return groups
    out = []
    for g in groups:
        idx = [i for i, p in enumerate(g["params"]) if id(p) in FUSED_A]
        if not g.get("weight_decay", weight_decay) or not idx:
            out.append(g)
            continue
        keep = [i for i in range(len(g["params"])) if i not in set(idx)]
        if keep:
            rest = dict(g, params=[g["params"][i] for i in keep], param_names=[g["param_names"][i] for i in keep])
            out.append(rest)
        out.append(dict(g, params=[g["params"][i] for i in idx], param_names=[g["param_names"][i] for i in idx],
                        weight_decay=0.0, reparam_decay=g.get("weight_decay", weight_decay)))
    return out


def fused_decay(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    """Optimizer step pre-hook: decay B = W - A (decoupled for AdamW, L2 otherwise)."""
    for group in optimizer.param_groups:
        wd = group.get("reparam_decay")
        if not wd:
            continue
        decoupled = bool(group.get("decoupled_weight_decay", False)) or isinstance(optimizer, torch.optim.AdamW)
        sign = -1.0 if group.get("maximize", False) else 1.0
        with torch.no_grad():
            for p in group["params"]:
                a = FUSED_A.get(id(p))
                if a is None or p.grad is None:
                    continue
                if a.device != p.device:  # the model was moved after the plan was applied
                    a = FUSED_A[id(p)] = a.to(p.device)
                if decoupled:
                    p.lerp_(a, group["lr"] * wd)
                else:
                    p.grad.add_(p - a, alpha=sign * wd)
'''

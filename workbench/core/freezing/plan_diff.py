"""What :meth:`AppliedPlan.update` changed: :class:`PlanDiff` (iterating the key table), and the module names its text uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.core.plan import keys
from workbench.core.plan.tree import ModelTree, ModuleNode

__all__ = ["PlanDiff"]


@dataclass
class PlanDiff:
    """What :meth:`AppliedPlan.update` changed, key by key of the key table.

    How a key's change shows is its row's :attr:`~workbench.core.plan.keys.PlanKey.diff`:
    ``frozen`` as parameters whose ``requires_grad`` flipped, the extension keys as modules
    re-installed, every other setting key in :attr:`changed` under its name.

    Attributes:
        newly_frozen / newly_trainable: parameter names whose ``requires_grad`` flipped.
        reinstalled: module paths whose extensions were removed or installed (their
            parameter objects may be new).
        changed: ``{key: names}`` for each other key whose value in force changed: trainable
            parameter names (kept across the update) for a ``per_param`` key, BatchNorm paths
            for a ``batchnorm_only`` key, module paths otherwise.
        tree: the model's tree, to name the modules in :meth:`describe` (None: parameter owners).
    """

    newly_frozen: list[str] = field(default_factory=list)
    newly_trainable: list[str] = field(default_factory=list)
    reinstalled: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)
    tree: ModelTree | None = field(default=None, repr=False, compare=False)

    @property
    def lr_changed(self) -> list[str]:
        """Trainable parameter names whose lr_scale changed (``changed["lr_scale"]``)."""
        return self.changed.get("lr_scale", [])

    @property
    def bn_changed(self) -> list[str]:
        """BatchNorm paths whose eval lock changed (``changed["bn_eval"]``)."""
        return self.changed.get("bn_eval", [])

    @property
    def eval_changed(self) -> list[str]:
        """Module paths whose ``eval`` setting changed (``changed["eval"]``)."""
        return self.changed.get("eval", [])

    @property
    def empty(self) -> bool:
        """Nothing changed."""
        return not (self.newly_frozen or self.newly_trainable or self.reinstalled or any(self.changed.values()))

    def describe(self) -> str:
        """Short text for plot markers and logs, naming the modules (``unfroze bert.encoder.layer.2``).

        Parameters first (frozen, trainable, then the ``per_param`` keys), then re-installed
        modules, then the other keys, each under its row's short text, in key-table order.
        """
        parts = []
        if self.newly_frozen:
            parts.append(f"froze {self._params(self.newly_frozen)}")
        if self.newly_trainable:
            parts.append(f"unfroze {self._params(self.newly_trainable)}")
        rows = [k for k in keys.SETTING_KEYS if k.diff == "value" and self.changed.get(k.name)]
        parts += [f"{k.short} {self._params(self.changed[k.name])}" for k in rows if k.per_param]
        if self.reinstalled:
            tensors = "/".join(k.short for k in keys.SETTING_KEYS if k.diff == "tensors")
            parts.append(f"{tensors} {_compact(self.reinstalled)}")
        for k in rows:
            if not k.per_param:
                paths = self.changed[k.name]
                parts.append(f"{k.short} {_compact(paths if k.batchnorm_only else _outermost(paths))}")
        return "; ".join(parts) or "no change"

    def _params(self, names: list[str]) -> str:
        if self.tree is None:
            return _compact(sorted({n.rsplit(".", 1)[0] if "." in n else "" for n in names}))
        return _compact(_whole_modules(self.tree, names))


def _outermost(paths: list[str]) -> list[str]:
    """The paths not inside another path of the list."""
    ps = sorted(set(paths), key=lambda p: (p.count("."), p))
    out: list[str] = []
    for p in ps:
        if not any(q == "" or p.startswith(q + ".") for q in out):
            out.append(p)
    return out


def _whole_modules(tree: ModelTree, raw_names: list[str]) -> list[str]:
    """The largest modules every parameter of which is in ``raw_names``, and the owners of the
    names left over (a change of a few parameters of a module)."""
    changed = {tree.param_name(n) for n in raw_names}
    total: dict[str, int] = {}
    hit: dict[str, int] = {}
    for name in tree.param_shapes:
        node: ModuleNode | None = tree.nodes[name.rpartition(".")[0]]
        inside = name in changed
        while node is not None:
            total[node.path] = total.get(node.path, 0) + 1
            hit[node.path] = hit.get(node.path, 0) + inside
            node = node.parent
    whole = [p for p, n in total.items() if n and hit.get(p) == n]
    out = _outermost(whole)
    covered = set(out)
    for name in sorted(changed):
        owner = name.rpartition(".")[0]
        if not any(owner == q or q == "" or owner.startswith(q + ".") for q in covered):
            covered.add(owner)
            out.append(owner)
    return sorted(out, key=lambda p: tree.nodes[p].order if p in tree.nodes else 0)


def _compact(mods: list[str]) -> str:
    """Module paths for a label: all when few, else their common prefix and how many."""
    mods = list(dict.fromkeys(mods))
    if not mods:
        return ""
    if len(mods) <= 3:
        return ", ".join(m or "(root)" for m in mods)
    parts = [m.split(".") for m in mods]
    prefix: list[str] = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        prefix.append(level[0])
    if prefix:
        return f"{'.'.join(prefix)} ({len(mods)} modules)"
    tops = sorted({m.split(".")[0] or "(root)" for m in mods})
    return ", ".join(tops[:3]) + (f" +{len(tops) - 3}" if len(tops) > 3 else "")

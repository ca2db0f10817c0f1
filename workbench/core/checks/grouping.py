"""Findings grouped by module (one finding per kind, named by the deepest module holding
them all), and the parameter lists the checks read.

Shared by the static check (:mod:`workbench.core.checks.static_check`) and the runtime watch
(:mod:`workbench.core.checks.watch`); :mod:`workbench.core.checks.doctor` re-exports
:func:`merge_findings` and :func:`group_findings`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from workbench.core.checks.findings import SEVERITIES, Finding
from workbench.core.plan.covering import cover_paths
from workbench.core.plan.tree import ModelTree

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "common_path",
    "group_findings",
    "grouped_paths",
    "merge_findings",
    "names_text",
    "own_parameters",
    "unique_params",
]


def common_path(paths: Sequence[str]) -> str:
    """The deepest dotted module path that contains every path (``""``: the root)."""
    if not paths:
        return ""
    parts = [p.split(".") if p else [] for p in paths]
    common: list[str] = []
    for segs in zip(*parts):
        if all(s == segs[0] for s in segs):
            common.append(segs[0])
        else:
            break
    return ".".join(common)


def names_text(paths: Sequence[str], limit: int = 4) -> str:
    """Up to ``limit`` module paths, briefly (``a, b and 3 more``)."""
    if list(paths) == [""]:
        return "across the whole model"
    shown = [p or "(model)" for p in paths[:limit]]
    more = len(paths) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def grouped_paths(tree: ModelTree, flagged: dict[str, int], universe: dict[str, int]) -> list[str]:
    """Cover paths for modules with flagged tensors, blocking modules with unflagged ones.

    A module with both (some parameters flagged, others not) is named itself.
    """
    blocked = [p for p, n in universe.items() if flagged.get(p, 0) < n]
    return cover_paths(tree, [p for p, n in flagged.items() if n], blocked)


def unique_params(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Each parameter once (tied ones under their first name), in model order."""
    seen: set[int] = set()
    out = []
    for name, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def own_parameters(module: nn.Module) -> list[nn.Parameter]:
    """A module's own parameters, those moved under A+B (``parametrizations``) included."""
    own = list(module.parameters(recurse=False))
    from torch import nn  # a module comes with torch imported

    param = getattr(module, "parametrizations", None)
    if isinstance(param, nn.Module):
        own += list(param.parameters())
    return own


def merge_findings(*lists: Iterable[Finding]) -> list[Finding]:
    """Concatenate finding lists without duplicates, errors first.

    Args:
        *lists: finding lists (from :func:`check`, :meth:`Watch.findings`, the linter).

    Returns:
        One list, each finding once, sorted by severity (stable otherwise).
    """
    seen: set[tuple[str, str, str]] = set()
    out: list[Finding] = []
    for lst in lists:
        for f in lst:
            key = (f.code, f.path, f.message)
            if key not in seen:
                seen.add(key)
                out.append(f)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    out.sort(key=lambda f: order[f.severity])
    return out


def group_findings(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per kind (code and severity): later ones of a kind fold into the first.

    The folded finding keeps the first one's message, why and fix, names the other modules
    briefly (``and 3 more like it: layer1, layer2.0, fc``) and its path is the deepest module
    containing them all.

    Args:
        findings: findings in the order they should be reported.

    Returns:
        The grouped findings, in the order of each kind's first finding.
    """
    kinds: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        kinds.setdefault((f.code, f.severity), []).append(f)
    out: list[Finding] = []
    for group in kinds.values():
        first = group[0]
        if len(group) == 1:
            out.append(first)
            continue
        paths = list(dict.fromkeys(f.path for f in group))
        others = list(dict.fromkeys(f.path for f in group[1:]))
        out.append(
            Finding(
                first.code,
                first.severity,
                common_path(paths),
                f"{first.message} (and {len(group) - 1} more like it: {names_text(others)})",
                first.why,
                first.fix,
            )
        )
    return out

"""BatchNorm whose running statistics never move: the finding the linter, the doctor's static
check and its runtime watch all give, in one wording.

A BatchNorm with ``momentum=0`` (or ``track_running_stats`` switched off with its buffers kept)
normalises each training batch with that batch's statistics, while its stored statistics stay
where they were: evaluation then normalises with statistics training never saw. CREPE's six
BatchNorm layers are built this way (converted from Keras); on a shifted pitch domain one
``bn_eval`` rule took full fine-tuning from 68 % to 73 % after 150 steps (docs/training.md,
"What a plan buys: CREPE").
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from workbench.core.checks.findings import Finding
from workbench.core.checks.grouping import common_path, names_text
from workbench.core.plan.tree import ModelTree

__all__ = ["CODE", "bn_eval_rule", "fixed_stats_finding"]

#: The finding's code.
CODE = "bn-fixed-stats-train-mode"


def bn_eval_rule(tree: ModelTree, paths: Sequence[str]) -> str:
    """The plan rule (JSON) that keeps ``paths`` in eval mode, as briefly as the tree allows.

    Args:
        tree: the model's tree.
        paths: BatchNorm module paths.

    Returns:
        ``{"select": "type:BatchNorm2d", "bn_eval": true}`` when ``paths`` are exactly the
        BatchNorm modules of one type; one module's path when there is one; otherwise one rule
        per module, comma-separated.
    """
    chosen = set(paths)
    types = {tree.nodes[p].type_name for p in paths}
    if len(paths) > 1 and len(types) == 1:
        same_type = {p for p, n in tree.nodes.items() if n.type_name in types}
        if same_type == chosen:
            return json.dumps({"select": f"type:{next(iter(types))}", "bn_eval": True})
    return ", ".join(json.dumps({"select": p or "*", "bn_eval": True}) for p in paths)


def fixed_stats_finding(tree: ModelTree, paths: Sequence[str]) -> Finding:
    """The finding for BatchNorm modules with fixed statistics that run in train mode.

    Args:
        tree: the model's tree.
        paths: the modules, in tree order (at least one).

    Returns:
        One ``bn-fixed-stats-train-mode`` warning naming them, with the ``bn_eval`` rule as fix.
    """
    n = len(paths)
    one = n == 1
    return Finding(
        CODE,
        "warning",
        common_path(list(paths)),
        f"{n} BatchNorm module{'' if one else 's'} with fixed running statistics (momentum 0 or "
        f"track_running_stats off) run{'s' if one else ''} in train mode: {names_text(list(paths))}",
        "in training batch statistics normalise, while the stored ones never move: evaluation "
        "normalises with statistics training never saw",
        f"keep {'it' if one else 'them'} in eval mode ({'its' if one else 'their'} weights still train) "
        f"with the plan rule {bn_eval_rule(tree, paths)}",
    )

"""Auto-freeze: freeze the front blocks whose gradients have settled, while training.

After AutoFreeze (Liu et al., 2021) and Egeria (EuroSys 2023): a block whose gradient norm
stops changing has converged, and freezing it from the front keeps the frozen part a prefix,
so the frozen-prefix cache (:mod:`workbench.core.training.frozen_cache`) can skip it.

:class:`AutoFreezer` reads the per-module gradient norms the engine measures anyway
(:class:`~workbench.core.training.module_stats.ModuleStats`) for the model's repeated blocks
(the ones FSDP shards one by one: :func:`~workbench.core.training.fsdp.block_paths`). Every
``every`` steps it compares each trainable block's mean gradient norm over the last window
with the window before; a block has **flattened** when the relative change is below
``threshold``. It then freezes the front-most run of flattened blocks right after the frozen
prefix (never a block after a trainable one), together with what runs before the first block
(stem, embeddings, the root's own parameters such as a class token), up to ``max_fraction``
of the blocks. Frozen modules are locked in eval mode (``eval: true``) so the prefix is
deterministic and the cache applies.

**A freeze must pay.** Freezing a block stops its learning; what it buys is the block's share
of each step's compute (its backward pass, and its forward once the cache serves). Those shares
are uneven on real models: on CREPE tiny ``conv1`` and ``conv2`` hold 91 % of the forward
multiply-accumulates and the eleven other layers 9 %, so after the first two every further
freeze costs learning and saves about 1 % of a step. :class:`AutoFreezer` counts each block's
share on the model's first forward pass (:class:`~workbench.core.training.auto_freeze_cost.BlockCosts`);
a block is worth freezing when it holds at least :data:`WORTH_SHARE` (half) of an even share,
``1 / blocks``, and auto-freeze stops after the last block worth freezing (within
``max_fraction``): "nothing more worth freezing". The blocks before that one freeze by the
flattening test as before, a cheap one among them too (a normalisation layer on the way to
the next convolution). Half an even share keeps every block of a model of similar blocks (a
transformer's layers; a ResNet's blocks, whose shares differ by a fifth) and leaves out layers
an order of magnitude cheaper than the average. The flattening test says when a block may
freeze (AutoFreeze); the share says whether freezing it is worth its learning, the trade
FreezeOut (Brock et al., 2017) makes per layer for the backward passes it saves.

By default the interval scales with the run (:func:`auto_interval`): 5 % of its steps, at
least 10. A fixed interval came too late for short runs (every 50 steps, a 100-step run
compares its windows once, at its midpoint) and too often for long ones, where short windows
are noise. As in FreezeOut (Brock et al., 2017), whose freezing schedule is a share of the
training budget, a run of any length gets the same number of evaluations, 20.

Each decision is a plan **stage** at the next step, handed to the trainer through
:meth:`~workbench.core.training.engine.Trainer.request_plan` (the normal path: a plan-change
event, a marker on the plots, the tree's rows turn frozen). The stages together are a plan
that reproduces the run without auto-freeze (:meth:`AutoFreezer.plan`, written as
``auto_freeze.plan.json`` in the run folder).

Every evaluation, whether it freezes or not, is one line for the run's events
(:meth:`AutoFreezer.take_events`): ``auto-freeze, step 50: no block flattened (smallest change
34 %, threshold 10 %)``, which the app shows in its status line and as a faint tick on the plots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from workbench.core.plan.rules import FreezePlan, Rule, Stage
from workbench.core.training.auto_freeze_cost import BlockCosts
from workbench.core.training.module_stats import ModuleStats

__all__ = ["AUTO_EVERY_FLOOR", "AUTO_EVERY_SHARE", "PLAN_FILE", "WORTH_SHARE", "AutoFreezeDecision", "AutoFreezer",
           "auto_interval", "front_modules", "front_paths", "max_frozen_blocks", "worth_freezing"]

#: The file the decisions are written to, in the run's save folder.
PLAN_FILE = "auto_freeze.plan.json"
#: The default interval is this share of the run's steps ...
AUTO_EVERY_SHARE = 0.05
#: ... and at least this many steps (a window of a few gradient-norm measurements).
AUTO_EVERY_FLOOR = 10
#: The interval when the run's length is not known.
AUTO_EVERY_UNKNOWN = 50
#: A block is worth freezing when it holds at least this share of what an even split of the
#: compute over the blocks would give it (see the module's docstring).
WORTH_SHARE = 0.5


def auto_interval(total_steps: int | None) -> int:
    """The default decision interval of a run of ``total_steps`` steps.

    Args:
        total_steps: the run's steps (None or 0: not known).

    Returns:
        :data:`AUTO_EVERY_SHARE` of the steps, rounded, at least :data:`AUTO_EVERY_FLOOR`;
        :data:`AUTO_EVERY_UNKNOWN` when the length is not known.
    """
    if not total_steps or total_steps < 1:
        return AUTO_EVERY_UNKNOWN
    return max(AUTO_EVERY_FLOOR, round(total_steps * AUTO_EVERY_SHARE))


def max_frozen_blocks(max_fraction: float, blocks: int) -> int:
    """The most blocks auto-freeze may freeze: ``floor(max_fraction * blocks)``.

    Args:
        max_fraction: ``TrainConfig.auto_freeze_max``.
        blocks: the model's blocks.

    Returns:
        The count (0 when the fraction allows none).
    """
    return int(math.floor(max_fraction * blocks + 1e-9))


def worth_freezing(run: list[str], costs: BlockCosts) -> list[str]:
    """``run`` through its last block worth freezing: one that holds at least :data:`WORTH_SHARE` of an even
    share of the compute (``1 / len(costs.blocks)``); all of ``run`` while the costs are not counted.

    Auto-freeze never freezes past that block; the advisor's auto-freeze candidate ends there too.

    Args:
        run: consecutive blocks from the front, in order.
        costs: the model's counted compute shares.

    Returns:
        A prefix of ``run`` (empty: none of it is worth freezing).
    """
    if not costs.known:
        return run
    least = WORTH_SHARE / len(costs.blocks)
    worth = [i for i, b in enumerate(run) if costs.share(b) >= least]
    return run[: worth[-1] + 1] if worth else []


@dataclass
class AutoFreezeDecision:
    """One decision.

    Attributes:
        at_step: the step the freeze takes effect.
        blocks: blocks frozen by it.
        changes: each frozen block's relative gradient-norm change over the last window.
        saves: the share of a step's compute the freeze saves (None: the costs were not counted).
    """

    at_step: int
    blocks: list[str]
    changes: dict[str, float] = field(default_factory=dict)
    saves: float | None = None


def front_paths(model: nn.Module, first_block: str) -> list[str]:
    """What runs before the first block: modules before it in the model's order that are not
    its ancestors, outermost only, and the root's own parameters (as ``param:NAME``).

    Args:
        model: the model.
        first_block: the first block's path.

    Returns:
        Plan selectors.
    """
    ancestors = {first_block}
    p = first_block
    while "." in p:
        p = p.rsplit(".", 1)[0]
        ancestors.add(p)
    ancestors.add("")
    out: list[str] = []
    for name, m in model.named_modules():
        if name == first_block:
            break
        if not name or name in ancestors or name.endswith("parametrizations") or ".parametrizations" in name:
            continue
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        if parent in ancestors and any(True for _ in m.parameters()):
            out.append(name)
    out.extend(f"param:{n}" for n, _ in model.named_parameters(recurse=False))
    return out


def front_modules(model: nn.Module, first_block: str) -> list[str]:
    """The modules of :func:`front_paths` (its ``param:`` selectors left out): what :class:`BlockCosts`
    prices as the front.

    Args:
        model: the model.
        first_block: the first block's path.

    Returns:
        Module paths.
    """
    return [p for p in front_paths(model, first_block) if not p.startswith("param:")]


class AutoFreezer:
    """Decides, from measured gradient norms, which front blocks to freeze.

    Args:
        model: the model (plan applied).
        blocks: the model's repeated blocks in execution order (see
            :func:`~workbench.core.training.fsdp.block_paths`).
        every: decide every N steps; None: :func:`auto_interval` of ``total_steps``.
        threshold: a block has flattened when its mean gradient norm changed by less than
            this share between the last two windows.
        max_fraction: freeze at most this share of the blocks.
        total_steps: the run's steps (for the default interval; None: not known).

    Raises:
        ValueError: no blocks, or settings out of range.
    """

    def __init__(self, model: nn.Module, blocks: list[str], every: int | None, threshold: float, max_fraction: float,
                 total_steps: int | None = None) -> None:
        if not blocks:
            raise ValueError("the model has no repeated blocks to freeze one by one")
        #: how the interval was chosen, for the first evaluation's line ("" when it was given)
        self.interval_source = ""
        if every is None:
            every = auto_interval(total_steps)
            self.interval_source = (f"every {every} steps: {_pct(AUTO_EVERY_SHARE)} of {total_steps}, at least "
                                    f"{AUTO_EVERY_FLOOR}" if total_steps else
                                    f"every {every} steps: the run's length is not known")
        if every < 1 or not 0 < max_fraction <= 1 or not threshold > 0:
            raise ValueError("auto-freeze needs every >= 1, 0 < max fraction <= 1 and a threshold > 0")
        self.model = model
        self.blocks = list(blocks)
        self.every = every
        self.total_steps = total_steps if total_steps and total_steps > 0 else None
        self.threshold = threshold
        self.max_blocks = max_frozen_blocks(max_fraction, len(blocks))
        self.decisions: list[AutoFreezeDecision] = []
        self._window: dict[str, list[float]] = {}
        self._previous: dict[str, float] = {}
        self._front_done = False
        self._events: list[str] = []
        #: each block's share of the compute, counted on the model's first forward pass
        self.costs = BlockCosts(model, self.blocks, front_modules(model, self.blocks[0]))
        #: a block is worth freezing when it holds at least this share of the compute
        self.min_share = WORTH_SHARE / len(self.blocks)

    def take_events(self) -> list[str]:
        """What each evaluation since the last call found, one line each (for the run's events)."""
        ev, self._events = self._events, []
        return ev

    def _say(self, step: int, text: str) -> None:
        self._events.append(f"auto-freeze, step {step + 1}: {text}")

    @property
    def measure_every(self) -> int:
        """How often the gradient norms should be measured (a few times per window)."""
        return max(1, self.every // 4)

    def observe(self, stats: ModuleStats) -> None:
        """Take one measured step's gradient norms of the trainable blocks.

        Args:
            stats: the step's statistics.
        """
        for b in self.blocks:
            g = stats.grad_norm(b)
            if g is not None and math.isfinite(g):
                self._window.setdefault(b, []).append(g)

    def frozen_blocks(self) -> int:
        """Blocks frozen now (a block is frozen when none of its parameters trains)."""
        n = 0
        for b in self.blocks:
            if any(p.requires_grad for p in self.model.get_submodule(b).parameters()):
                break
            n += 1
        return n

    def decide(self, step: int, plan: FreezePlan) -> FreezePlan | None:
        """At the end of ``step``: the plan with one more stage, or None (nothing to freeze).

        Args:
            step: the step just done (decisions happen every ``every`` steps).
            plan: the run's full plan now (stages included).

        Returns:
            ``plan`` plus a stage at ``step + 1`` freezing the next flattened front blocks,
            or None. Never at the run's last step (a stage after it would apply to no step):
            the step before says that evaluation is skipped.
        """
        last = self.total_steps is not None and step + 1 >= self.total_steps
        new = None if last or (step + 1) % self.every else self._evaluate(step, plan)
        if self.total_steps is not None and step + 2 == self.total_steps and self.total_steps % self.every == 0:
            self._say(step, f"the evaluation due at step {self.total_steps} is skipped: it is the run's last step, "
                            "where a freeze would train no step")
        return new

    def _evaluate(self, step: int, plan: FreezePlan) -> FreezePlan | None:
        """An evaluation at the end of ``step`` (see :meth:`decide`)."""
        means = {b: sum(v) / len(v) for b, v in self._window.items() if v}
        previous, self._previous, self._window = self._previous, means, {}
        start = self.frozen_blocks()
        left = self.blocks[start : self.max_blocks]
        limit = start + len(worth_freezing(left, self.costs))  # nothing after the last block worth freezing
        if left and limit == start:
            self._say(step, f"nothing more worth freezing: {_span(left)} would save {_pct(self._saving(left))} of the "
                            f"step's compute ({self._little()})")
            return None
        chosen: list[str] = []
        changes: dict[str, float] = {}
        blocker = ""
        for b in self.blocks[start:limit]:
            now, before = means.get(b), previous.get(b)
            if now is None or before is None or before <= 0:
                blocker = blocker or b
                break
            change = abs(now - before) / before
            changes[b] = change
            if change >= self.threshold:
                blocker = blocker or b
                break
            chosen.append(b)
        if not chosen:
            self._say(step, self._why_not(start, means, previous, blocker))
            return None
        saves = self._saving(chosen, front=start == 0 and not self._front_done)
        rest = self.blocks[limit : self.max_blocks] if start + len(chosen) == limit else []
        self._say(step, f"{_span(chosen)} flattened (change {', '.join(_pct(changes[b]) for b in chosen)}, threshold "
                        f"{_pct(self.threshold)}): frozen from step {step + 2}"
                  + (f", saving {_pct(saves)} of the step's compute" if self.costs.known else "")
                  + (f"; the last worth freezing: {_span(rest)} would save {_pct(self._saving(rest))} "
                     f"({self._little()})" if rest else ""))
        rules = []
        if start == 0 and not self._front_done:
            rules += [Rule(sel, frozen=True, eval=True) for sel in front_paths(self.model, self.blocks[0])]
            self._front_done = True
        rules += [Rule(b, frozen=True, eval=True) for b in chosen]
        label = f"auto-freeze {_span(chosen)}"
        new = plan.copy()
        new.add_stage(Stage(rules=rules, at_step=step + 1, label=label))  # in time order: a later stage of the plan still wins
        self.decisions.append(AutoFreezeDecision(step + 1, chosen, {b: changes[b] for b in chosen},
                                                 saves if self.costs.known else None))
        return new

    def _saving(self, blocks: list[str], front: bool = False) -> float:
        """The share of the step's compute freezing ``blocks`` saves (and what runs before the first block)."""
        return sum(self.costs.share(b) for b in blocks) + (self.costs.front_share() if front else 0.0)

    def _little(self) -> str:
        """Why a saving is too small, in a few words."""
        return f"a block is worth freezing from {_pct(self.min_share)}, half an even share"

    def _why_not(self, start: int, means: dict[str, float], previous: dict[str, float], blocker: str) -> str:
        """Why an evaluation froze nothing, in a few words."""
        if start >= self.max_blocks:
            return (f"nothing more to freeze ({start} of {len(self.blocks)} blocks frozen, the maximum is "
                    f"{_pct(self.max_blocks / len(self.blocks))})")
        if not previous:
            how = f", {self.interval_source}" if self.interval_source else ""
            return f"first window measured ({len(means)} blocks{how}); the next evaluation compares with it"
        candidates = self.blocks[start : self.max_blocks]
        change = {b: abs(means[b] - previous[b]) / previous[b] for b in candidates
                  if b in means and previous.get(b, 0) > 0}
        if not change:
            return f"no gradient norm measured for {blocker or candidates[0]} in both windows"
        smallest = min(change.values())
        if smallest >= self.threshold:
            return f"no block flattened (smallest change {_pct(smallest)}, threshold {_pct(self.threshold)})"
        lead = f"change {_pct(change[blocker])}" if blocker in change else "not measured"
        return (f"{blocker} has not flattened ({lead}, threshold {_pct(self.threshold)}); the blocks after it "
                f"wait (smallest change {_pct(smallest)})")

    def summary(self) -> dict[str, Any]:
        """JSON-ready: the decisions and the blocks frozen."""
        return {
            "every": self.every,
            "blocks": len(self.blocks),
            "frozen_blocks": sum(len(d.blocks) for d in self.decisions),
            "decisions": [{"at_step": d.at_step, "blocks": d.blocks, "changes": d.changes, "saves": d.saves}
                          for d in self.decisions],
            "compute_shares": {b: round(v, 5) for b, v in self.costs.shares().items()},
        }


def _pct(x: float) -> str:
    """A share as a percentage: ``34 %``, ``0.4 %``."""
    return f"{x * 100:.0f} %" if x >= 0.095 or x == 0 else f"{x * 100:.1g} %"


def _span(blocks: list[str]) -> str:
    """``conv1`` or ``conv1 .. conv3``."""
    return blocks[0] + (f" .. {blocks[-1]}" if len(blocks) > 1 else "")

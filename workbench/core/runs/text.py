"""A run in words, as the app's Runs tab and ``workbench runs`` show it.

Plans (:func:`plan_text`, one phrase per rule from the plan key table), validation
(:func:`validation_text`), the setup (:func:`setup_text`, with the frozen-prefix cache:
:func:`cache_text`) and the cells of a runs table (:func:`step_time_text`,
:func:`trainable_text`, :func:`loss_text`, :func:`val_loss_text`, :func:`val_acc_text`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.core.formatting import fmt_bytes, fmt_count, fmt_percent
from workbench.core.plan.keys import RULE_KEYS
from workbench.core.runs.record import RunSummary, Validation
from workbench.core.training.task_metrics import metric_label

__all__ = [
    "NO_VALUE",
    "cache_text",
    "loss_text",
    "plan_text",
    "rule_text",
    "setup_text",
    "step_time_text",
    "trainable_text",
    "val_acc_text",
    "val_loss_text",
    "validation_text",
]

#: What a cell shows for a number the run does not have.
NO_VALUE = "–"
_KEYS: frozenset[str] = frozenset(k.name for k in RULE_KEYS)


def rule_text(rule: Mapping[str, Any]) -> str:
    """A plan rule in a few words: its selector, then each setting it makes, in key-table order.

    Args:
        rule: the rule as a dict (possibly hand-edited: unknown keys show as ``key=value``).

    Returns:
        ``"layer1 frozen"``, ``"fc trains lr×0.1"`` (each key by :meth:`PlanKey.summary`).
    """
    select = str(rule.get("select") or "*")
    bits = [k.summary(rule[k.name]) for k in RULE_KEYS if k.setting and k.name in rule]
    bits += [f"{name}={value}" for name, value in rule.items() if name not in _KEYS]
    return f"{select} {' '.join(bits)}".strip()


def plan_text(plan: Mapping[str, Any] | None, *, most: int = 2) -> str:
    """A plan in a few words for the runs table: ``layer1 frozen, fc trains +1``.

    Args:
        plan: the plan as a dict (``FreezePlan.to_dict()``), possibly hand-edited.
        most: rules spelled out; the rest are counted.

    Returns:
        The text; ``"all train"`` for a plan without rules, ``"no plan"`` without a plan.
    """
    if not isinstance(plan, Mapping):
        return "no plan"
    raw = plan.get("rules")
    rules = [r for r in raw if isinstance(r, Mapping)] if isinstance(raw, list) else []
    text = ", ".join(rule_text(r) for r in rules[:most]) if rules else "all train"
    if len(rules) > most:
        text += f" +{len(rules) - most}"
    stages = plan.get("stages")
    if isinstance(stages, list) and stages:
        text += f", {len(stages)} stage{'s' if len(stages) > 1 else ''}"
    return text


def validation_text(v: Validation | None, *, best: bool = True, detail: bool = False) -> str:
    """A run's validation in one line, as the app and ``workbench train`` show it:
    ``val loss 0.5120 (best 0.4980 after step 20) · acc 81.2 % (best 83.0 %)``.

    Args:
        v: a run's validation results (None: the run did not validate).
        best: add the best values where they differ from the last.
        detail: start with the step and the samples measured: ``after step 30 (64 samples): ...``.

    Returns:
        The text (the run's metric added when it is not accuracy), ``""`` for None.
    """
    if v is None:
        return ""
    text = f"val loss {v.loss:.4f}"
    if best and v.best_step != v.step:
        text += f" (best {v.best_loss:.4f} after step {v.best_step})"
    if v.acc is not None:
        text += f" · acc {100 * v.acc:.1f} %"
        if best and v.best_acc is not None and v.best_acc > v.acc:
            text += f" (best {100 * v.best_acc:.1f} %)"
    if v.metric is not None and v.metric_name != "accuracy":
        text += f" · {metric_label(v.metric_name)} {v.metric:.4g}"
    if detail:
        text = f"after step {v.step}" + (f" ({v.samples} samples)" if v.samples is not None else "") + f": {text}"
    return text


def step_time_text(s: RunSummary) -> str:
    """The median step time cell: ``12.3 ms``.

    Args:
        s: the run's numbers.

    Returns:
        The text, or :data:`NO_VALUE`.
    """
    return f"{s.step_ms:.1f} ms" if s.step_ms is not None else NO_VALUE


def trainable_text(s: RunSummary) -> str:
    """The trainable parameters cell: ``1,234 (5.0%)``.

    Args:
        s: the run's numbers.

    Returns:
        The text, or :data:`NO_VALUE`.
    """
    if s.trainable is None:
        return NO_VALUE
    return fmt_count(s.trainable) + (f" ({fmt_percent(s.trainable, s.total)})" if s.total else "")


def loss_text(s: RunSummary) -> str:
    """The final loss cell: ``0.1234``.

    Args:
        s: the run's numbers.

    Returns:
        The text, or :data:`NO_VALUE`.
    """
    return f"{s.final_loss:.4f}" if s.final_loss is not None else NO_VALUE


def val_loss_text(v: Validation | None) -> str:
    """The validation loss cell: the last loss, and the best where it was another step.

    Args:
        v: the run's validation, or None.

    Returns:
        ``0.5120 (best 0.4980)``, or :data:`NO_VALUE`.
    """
    if v is None:
        return NO_VALUE
    return f"{v.loss:.4f}" + (f" (best {v.best_loss:.4f})" if v.best_step != v.step else "")


def val_acc_text(v: Validation | None) -> str:
    """The validation accuracy cell: the last accuracy, and the best where it was higher.

    Args:
        v: the run's validation, or None.

    Returns:
        ``81.2 % (best 83.0)``, or :data:`NO_VALUE` (no validation, or not a classifier).
    """
    if v is None or v.acc is None:
        return NO_VALUE
    best = v.best_acc if v.best_acc is not None else v.acc
    return f"{100 * v.acc:.1f} %" + (f" (best {100 * best:.1f})" if best > v.acc else "")


def setup_text(
    config: Mapping[str, Any], *, num_classes: int | None = None, plan: Mapping[str, Any] | None = None,
    seq_len: int | None = None, frozen_cache: Any = None,
) -> str:
    """A run's setup in a few words: ``adamw lr 0.001 bs16 64px 10 classes cpu · layer1 frozen``.

    Args:
        config: the run's ``TrainConfig`` dict.
        num_classes: classes the run trained on (:meth:`RunRecord.num_classes`), if known.
        plan: the plan the run started with; summarised after a ``·`` when given.
        seq_len: tokens per sample of a run on text data (its summary's ``seq_len``): shown
            instead of the image size.
        frozen_cache: the frozen-prefix cache's read-out from the run's summary
            (``frozen_cache``: ``cut``, ``bytes_memory``, ``bytes_disk``, ``hit_rate``): shown as
            ``cache 26 MB hit 67%`` when the cache held rows.

    Returns:
        The text.
    """
    parts = [str(config.get("optimizer", "?"))]
    lr = config.get("lr")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        parts.append(f"lr {lr:g}")
    scheduler = config.get("scheduler")
    if scheduler and scheduler != "constant":
        parts.append(str(scheduler))
    if config.get("warmup_steps"):
        parts.append(f"warm-up {config['warmup_steps']}")
    if config.get("no_decay"):
        parts.append("no-decay")
    if config.get("val") or config.get("val_every"):
        every = config.get("val_every")
        parts.append("val" + (f"/{every}" if every else ""))
    parts.append(f"bs{config.get('batch_size', '?')}")
    if seq_len:
        parts.append(f"{seq_len} tokens")
    elif config.get("image_size"):
        parts.append(f"{config['image_size']}px")
    if num_classes:
        parts.append(f"{num_classes} classes")
    parts.append(str(config.get("device", "auto")))
    if config.get("amp") and config.get("amp") != "off":
        parts.append(str(config["amp"]))
    data = str(config.get("data", "synthetic"))
    if not data.startswith("synthetic"):
        parts.append(data.split(":", 1)[0])
    cache = cache_text(frozen_cache)
    if cache:
        parts.append(cache)
    text = " ".join(parts)
    return text if plan is None else f"{text} · {plan_text(plan)}"


def cache_text(frozen_cache: Any) -> str:
    """The frozen-prefix cache of a run in a few words: ``cache 26 MB hit 67%``.

    Args:
        frozen_cache: the ``frozen_cache`` entry of a run's summary (None, or a dict with
            ``bytes_memory``, ``bytes_disk``, ``hit_rate``, ``cut``); anything else is ignored.

    Returns:
        The words, or "" when the run had no cache or it held nothing.
    """
    if not isinstance(frozen_cache, Mapping) or not frozen_cache.get("cut"):
        return ""
    held = 0
    for key in ("bytes_memory", "bytes_disk"):
        v = frozen_cache.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            held += v
    rate = frozen_cache.get("hit_rate")
    if not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 <= rate <= 1):
        rate = None
    if not held and rate is None:
        return ""
    return f"cache {fmt_bytes(held)}" + (f" hit {rate:.0%}" if rate is not None else "")

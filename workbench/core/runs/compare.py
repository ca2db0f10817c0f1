"""The comparison line of runs: the cost of a plan next to its quality.

Runs are compared with the oldest of them (the base), plan segment by plan segment
(:meth:`~workbench.core.runs.record.RunRecord.segments`): a run that froze a block mid-way
shows its step time and trainable count before and after (``0.98× → 0.61×``), not only its
final numbers. Peak memory is a whole-run number; the last validation loss and accuracy
follow. The app's Runs tab shows the lines as HTML (the ratios in bold), ``workbench runs
compare`` as plain text: the same words and numbers, from :func:`compare_runs`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.core.formatting import fmt_count
from workbench.core.runs.record import RunRecord, RunSummary, Segment
from workbench.core.training.metrics import fmt_memory

__all__ = ["Comparison", "compare_runs", "compare_text", "oldest_first", "segments_line"]


@dataclass(frozen=True)
class _Bit:
    """One part of a comparison line: ``before`` + ``value`` (bold in HTML) + ``after``."""

    before: str
    value: str = ""
    after: str = ""

    def render(self, as_html: bool) -> str:
        if not as_html:
            return f"{self.before}{self.value}{self.after}"
        value = f"<b>{html.escape(self.value)}</b>" if self.value else ""
        return f"{html.escape(self.before)}{value}{html.escape(self.after)}"


@dataclass(frozen=True)
class Comparison:
    """Runs compared with a base run: one line per run, and each run's segments spelled out.

    Attributes:
        lines: ``(run name, base name, parts)`` per compared run.
        segments: one line per run (the base first): its plan segments with their medians.
    """

    lines: tuple[tuple[str, str, tuple[_Bit, ...]], ...]
    segments: tuple[str, ...]

    def text(self, *, as_html: bool = False) -> str:
        """The comparison lines.

        Args:
            as_html: HTML with the ratios in bold (the Runs tab), else plain text.

        Returns:
            One line per compared run (``<br>`` between lines in HTML, else newlines).
        """
        lines = []
        for name, base, bits in self.lines:
            head = f"{name} vs {base}: "
            body = ", ".join(b.render(as_html) for b in bits) if bits else "no numbers yet"
            lines.append((html.escape(head) if as_html else head) + body)
        return ("<br>" if as_html else "\n").join(lines)


def _ratios(mine: Sequence[float | None], base: Sequence[float | None]) -> str | None:
    """``0.95× → 0.80×``: each of ``mine`` over the base value of the same segment (the base's
    last segment for segments it does not have); None when no ratio can be formed."""
    out = []
    for i, b in enumerate(mine):
        a = base[min(i, len(base) - 1)] if base else None
        if a and b:
            out.append(f"{b / a:.2f}×")
    return " → ".join(out) if out else None


def segments_line(name: str, segments: Sequence[Segment]) -> str:
    """A run's plan segments in one line: ``#2: steps 0–9, 12.1 ms, 1,000 trainable; steps 10–19, ...``.

    Args:
        name: the run's name.
        segments: its segments.

    Returns:
        The line.
    """
    parts = []
    for s in segments:
        bits = [f"steps {s.start}–{s.end}"]
        if s.label:
            bits.append(f"after {s.label}")
        if s.step_ms is not None:
            bits.append(f"{s.step_ms:.1f} ms")
        if s.trainable is not None:
            bits.append(f"{fmt_count(int(s.trainable))} trainable")
        parts.append(", ".join(bits))
    return f"{name}: " + "; ".join(parts)


def _validation_bits(base_name: str, name: str, a: RunSummary, b: RunSummary) -> list[_Bit]:
    """``val loss 0.512 vs 0.498``, ``val acc 81.2 % vs 79.0 % (+2.2 pts)``: a run's last
    validation against the base run's (nothing when neither validated)."""
    va, vb = a.validation, b.validation
    if va is None or vb is None:
        if va is None and vb is None:
            return []
        return [_Bit(f"validation: {'only ' + name if vb is not None else 'not in ' + name}")]
    bits = [_Bit("val loss ", f"{vb.loss:.4f}", f" vs {va.loss:.4f}")]
    if va.acc is not None and vb.acc is not None:
        bits.append(_Bit("val acc ", f"{100 * vb.acc:.1f} %",
                         f" vs {100 * va.acc:.1f} % ({100 * (vb.acc - va.acc):+.1f} pts)"))
    return bits


def _line(base: RunRecord, a: RunSummary, r: RunRecord, b: RunSummary) -> tuple[_Bit, ...]:
    bits: list[_Bit] = []
    for what, mine, theirs in (
        ("step time", [s.step_ms for s in b.segments], [s.step_ms for s in a.segments]),
        ("trainable", [s.trainable for s in b.segments], [s.trainable for s in a.segments]),
    ):
        ratio = _ratios(mine, theirs)
        if ratio:
            bits.append(_Bit(f"{what} ", ratio))
    pa, pb = a.peak_memory, b.peak_memory
    if pa is not None and pb is not None:  # a measured 0 (no growth) is a number too
        ratio = f"{pb / pa:.2f}×" if pa > 0 else ""
        bit = _Bit("peak memory ", ratio, f"{' ' if ratio else ''}({fmt_memory(pb)} vs {fmt_memory(pa)})")
        bits.insert(1 if bits else 0, bit)
    if len(b.segments) > 1 or len(a.segments) > 1:
        bits.append(_Bit(f"per plan segment ({len(b.segments)} vs {len(a.segments)})"))
    bits.extend(_validation_bits(base.name, r.name, a, b))
    return tuple(bits)


def compare_text(base: RunRecord, others: Sequence[RunRecord]) -> Comparison:
    """Runs compared with a base run, by medians per plan segment.

    Segment *i* of a run is compared with segment *i* of the base (its last one where the
    base has fewer). The segments need the runs' metrics loaded.

    Args:
        base: the run the others are compared with.
        others: the runs to compare.

    Returns:
        The comparison (render it with :meth:`Comparison.text`).
    """
    a = base.summarize()
    lines, segs = [], [segments_line(base.name, a.segments)]
    for r in others:
        b = r.summarize()
        lines.append((r.name, base.name, _line(base, a, r, b)))
        segs.append(segments_line(r.name, b.segments))
    return Comparison(tuple(lines), tuple(segs))


def oldest_first(records: Sequence[RunRecord]) -> list[RunRecord]:
    """Runs in the order they are compared: oldest first (by start time, then id).

    Args:
        records: the runs.

    Returns:
        A sorted copy.
    """
    return sorted(records, key=lambda r: (r.created, r.id))


def compare_runs(records: Sequence[RunRecord]) -> Comparison | None:
    """Compare runs with the oldest of them, as the Runs tab and ``workbench runs compare`` do.

    Args:
        records: two or more runs (their metrics loaded for the per-segment numbers).

    Returns:
        The comparison, or None for fewer than two runs.
    """
    ordered = oldest_first(records)
    if len(ordered) < 2:
        return None
    return compare_text(ordered[0], ordered[1:])

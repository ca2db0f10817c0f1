"""The sweep report: the two Pareto fronts and the recommendation (no training)."""

from __future__ import annotations

from workbench.core.advisor.sweep_report import SweepReport, SweepRow, front_2d, recommend


def _row(i: int, metric: float | None, time_s: float, peak: int, *, status: str = "completed",
         retention: float | None = None) -> SweepRow:
    return SweepRow(f"c{i:02d}", f"plan {i}", 1e-3, status, steps=10, metric=metric, time_s=time_s,
                    peak_bytes=peak, trainable=100 * (i + 1), retention=retention)


def test_front_keeps_what_nothing_beats_on_both_metric_and_cost() -> None:
    rows = [_row(0, 0.50, 1.0, 30), _row(1, 0.70, 2.0, 10), _row(2, 0.60, 3.0, 20), _row(3, 0.90, 4.0, 40)]
    assert front_2d(rows, "time") == [0, 1, 3]  # plan 2 is slower and worse than plan 1
    assert front_2d(rows, "memory") == [1, 3]  # plan 0 and 2 use more memory than plan 1 and score less


def test_pruned_and_failed_rows_are_never_on_a_front() -> None:
    rows = [_row(0, 0.50, 1.0, 30), _row(1, 0.99, 0.1, 1, status="pruned"), _row(2, None, 0.1, 1, status="failed")]
    assert front_2d(rows, "time") == [0]


def test_a_loss_objective_is_smaller_is_better() -> None:
    rows = [_row(0, 0.3, 1.0, 10), _row(1, 0.2, 2.0, 10)]
    assert front_2d(rows, "time", maximize=False) == [0, 1]
    assert front_2d(rows, "memory", maximize=False) == [1]


def test_recommendation_is_the_cheapest_within_the_share_of_the_best() -> None:
    rows = [_row(0, 0.895, 1.0, 30), _row(1, 0.90, 5.0, 10), _row(2, 0.80, 0.5, 5)]
    i, text = recommend(rows, within=0.01, min_retention=None, by="time")
    assert i == 0 and "plan 0" in text and "within 1%" in text
    i, text = recommend(rows, within=0.01, min_retention=None, by="memory")
    assert i == 1  # plan 0 is within 1 % but uses more memory than plan 1
    assert "(<1 MB)" in text  # a measured peak of 10 bytes is written as every read-out writes it, not "0 MB"
    i, _ = recommend(rows, within=0.0, min_retention=None, by="time")
    assert i == 1


def test_the_retention_floor_leaves_out_plans_that_forget() -> None:
    rows = [_row(0, 0.90, 1.0, 30, retention=0.60), _row(1, 0.90, 5.0, 10, retention=0.97)]
    i, text = recommend(rows, within=0.01, min_retention=0.95, by="time")
    assert i == 1 and "retention 0.97 >= 0.95" in text
    i, text = recommend(rows, within=0.01, min_retention=0.99, by="time")
    assert i is None and "retention >= 0.99" in text


def test_nothing_to_recommend_when_nothing_finished() -> None:
    report = SweepReport.build([_row(0, 0.5, 1.0, 1, status="pruned")], objective="accuracy", maximize=True,
                               within=0.01, min_retention=None, by="time")
    assert report.recommended is None and report.recommendation.startswith("nothing to recommend")
    assert report.to_dict()["rows"][0]["status"] == "pruned"

"""The Suggest dialog's cost chart: DoRA and full-rank A+B are front points the cost line does not join."""

from __future__ import annotations

from typing import Any

from tests.core.advisor.test_a_plus_b_candidates import DORA, SHAPE, _model
from workbench.core.advisor.advice import advise
from workbench.core.advisor.front import pareto_front


def test_the_line_joins_the_cost_front_and_dora_is_a_point_beside_it(qtbot: Any) -> None:
    from workbench.gui.advisor.chart import FrontChart

    advice = advise(_model(), 2**30, SHAPE, optimizer="adamw")
    dora = next(i for i, a in enumerate(advice.assessed) if a.candidate.name == DORA)
    cost = pareto_front([a.point for a in advice.assessed])
    assert dora in advice.front and dora not in cost  # beaten on cost, kept for what it learns
    chart = FrontChart()
    qtbot.addWidget(chart)
    chart.show_advice(advice)
    assert len(chart.points[1].getData()[0]) == len(advice.front)
    line_x = list(chart._front_line.getData()[0])
    assert len(line_x) == len([i for i in advice.front if i in cost])
    assert advice.assessed[dora].memory.peak / 1e6 not in line_x

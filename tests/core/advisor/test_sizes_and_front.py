"""Memory sizes written by people, the Pareto front and the chosen plan."""

import pytest

from workbench.core.advisor.front import Point, choose, pareto_front
from workbench.core.advisor.profile import AdvisorError
from workbench.core.advisor.sizes import parse_size


@pytest.mark.parametrize(
    "text, expected",
    [("24GB", 24 * 10**9), ("512MiB", 512 * 2**20), ("1.5G", 1_500_000_000), ("80gb", 80 * 10**9),
     ("2 GiB", 2 * 2**30), ("1024", 1024), ("0.5TB", 5 * 10**11), (".5Gi", 2**29)],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "24XB", "-1GB", "0", "1.2.3G", "12 G B"])
def test_parse_size_rejects_bad_input_with_an_example(text):
    with pytest.raises(AdvisorError, match="24GB|zero"):
        parse_size(text)


def test_front_drops_dominated_points_and_keeps_ties():
    pts = [
        Point(100, 10, 0.3),   # 0 head
        Point(200, 50, 0.5),   # 1
        Point(250, 40, 0.6),   # 2 dominated by 1
        Point(200, 50, 0.5),   # 3 tie with 1: kept
        Point(400, 60, 1.0),   # 4 full
        Point(300, 50, 0.4),   # 5 more memory than 1 but faster: kept
    ]
    assert pareto_front(pts) == [0, 1, 3, 4, 5]


def test_front_keeps_points_within_one_percent():
    pts = [Point(1000, 50, 0.5), Point(995, 50, 0.5), Point(900, 50, 0.5)]
    assert pareto_front(pts[:2]) == [0, 1]  # 0.5 % less memory: a tie
    assert pareto_front(pts) == [2]         # 10 % less: dominates both


def test_choose_takes_the_most_trainable_within_budget():
    pts = [Point(100, 10, 0.3), Point(200, 50, 0.5), Point(150, 50, 0.6), Point(400, 60, 1.0)]
    assert choose(pts, 399) == 2  # 50 trainable; the smaller peak wins the tie
    assert choose(pts, 400) == 3
    assert choose(pts, 149) == 0
    assert choose(pts, 99) is None


def test_choose_prefers_the_earlier_of_near_twins():
    pts = [Point(1000, 50, 0.5), Point(995, 50, 0.5), Point(990, 50, 0.2)]
    assert choose(pts[:2], 2000) == 0  # 0.5 % less memory is a tie: the first listed wins
    assert choose(pts, 2000) == 2      # much faster

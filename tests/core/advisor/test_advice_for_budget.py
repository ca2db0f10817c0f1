"""Advice.for_budget: another budget re-chooses from the same predictions, as advising again would."""
from __future__ import annotations

import pytest

from workbench.core.advisor.advice import Measured, advise
from workbench.core.advisor.profile import AdvisorError
from workbench.core.advisor.sizes import parse_size

SHAPE = (2, 3, 32, 32)


@pytest.fixture
def advised(resnet18):
    """resnet18's advice at 100 MB (a low-rank plan fits, full fine-tuning and auto-freeze do not) and at 1 GB."""
    return resnet18, advise(resnet18, parse_size("100MB"), SHAPE), advise(resnet18, parse_size("1GB"), SHAPE)


def test_another_budget_gives_what_advising_again_gives(advised):
    _, small, large = advised
    assert small.chosen != large.chosen
    assert small.auto_freeze is not None and not small.auto_freeze.fits and large.auto_freeze.fits
    assert small.for_budget(large.budget_bytes).to_dict() == large.to_dict()
    assert large.for_budget(small.budget_bytes).to_dict() == small.to_dict()
    nothing = small.for_budget(small.weight_bytes)  # the weights fit, no plan does
    assert nothing.chosen is None and not any(a.fits for a in nothing.assessed)


def test_measurements_stay_and_the_advice_it_came_from_is_unchanged(advised):
    _, small, large = advised
    i = large.chosen
    large.assessed[i].measured = Measured(peak_bytes=123, memory_source="cpu", step_ratio=1.0, step_ms=5.0, steps=3)
    fitted = large.for_budget(small.budget_bytes)
    assert fitted.assessed[i].measured == large.assessed[i].measured
    assert fitted.assessed[i] is not large.assessed[i] and large.assessed[i].fits and not fitted.assessed[i].fits
    assert large.budget_bytes == parse_size("1GB") and large.chosen == i


def test_a_budget_below_the_weights_is_refused_as_advise_refuses_it(advised):
    model, small, _ = advised
    with pytest.raises(AdvisorError) as direct:
        advise(model, parse_size("40MB"), SHAPE)
    with pytest.raises(AdvisorError) as rechosen:
        small.for_budget(parse_size("40MB"))
    assert str(rechosen.value) == str(direct.value)
    assert "below the model's own weights" in str(direct.value)

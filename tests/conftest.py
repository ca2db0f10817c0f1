"""Test-suite-wide settings: small thread counts so the suite behaves on 2-core CI machines."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import torch
from hypothesis import settings

# Property tests: random examples on a developer's machine (to find new cases), the same
# examples on every CI run (a red CI is a change's fault, not the draw's); no per-example
# deadline either way, since a loaded machine is slow, not wrong.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# One intra-op thread: CI machines have 2 cores, and tests use tiny models where more threads
# only add scheduling noise. Benchmarks (tests/benchmarks/) choose their own thread counts.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def _resnet18_built() -> tuple[torch.nn.Module, torch.Tensor]:
    """resnet18 built once from seed 0, and the random state its build left."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None)
    return model, torch.get_rng_state()


@pytest.fixture
def resnet18(_resnet18_built: tuple[torch.nn.Module, torch.Tensor]) -> torch.nn.Module:
    """A fresh resnet18 with random weights (no download): a copy of one built from seed 0, with the
    random state that build left, as building it again would give (a build initialises 0.2 s of weights)."""
    import copy

    model, state = _resnet18_built
    torch.set_rng_state(state)
    return copy.deepcopy(model)


@pytest.fixture(autouse=True)
def fresh_code_confirmations() -> Iterator[None]:
    """Each test starts a new app session: no ``py:`` code confirmed by an earlier test (the
    session's confirmations live in the app's process, and a test process runs many tests)."""
    confirm = sys.modules.get("workbench.gui.training.code_confirm")  # never imported for core tests
    if confirm is not None:
        confirm.forget_confirmations()
    yield


@pytest.fixture(scope="module")
def long_lived_frozen() -> Iterator[None]:
    """The objects alive when a module's first test starts, left out of every garbage collection until its last
    ends: ``workbench sweep``'s own freeze (``gc.freeze``), as it and the app's idle freeze leave them for a sweep,
    whose collection after each candidate (Optuna's ``gc_after_trial``) then walks what was made since, not the
    test process's hundreds of thousands of objects (0.3 s each). Where something froze objects already, nothing
    changes."""
    from workbench.commands import sweep

    with sweep._long_lived_left_out():
        yield

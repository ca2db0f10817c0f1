"""One table of optimizers: what the engine builds is what the exported script writes; 'sgd' has no momentum."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.core.optimizers import CHOICES, OPTIMIZER_TABLE, optimizer_kind, state_copies
from workbench.core.training.config import TrainConfig
from workbench.core.training.setup import make_optimizer


@pytest.mark.parametrize("name", CHOICES)
def test_the_engine_builds_what_the_script_writes(name: str):
    cfg = TrainConfig(optimizer=name, lr=0.02, weight_decay=0.003, momentum=0.7)
    groups = [{"params": [nn.Parameter(torch.zeros(2))]}]
    built = make_optimizer(cfg, groups)
    kind = optimizer_kind(name)
    written = eval(kind.source(cfg), {"torch": torch, "groups": [{"params": [nn.Parameter(torch.zeros(2))]}]})
    assert type(built) is type(written)
    assert built.defaults == written.defaults
    for h in kind.hypers:  # every hyperparameter is written out
        assert f"{h.name}=" in kind.source(cfg)


def test_sgd_is_plain_sgd_and_sgd_momentum_takes_the_configs_momentum():
    params = [{"params": [nn.Parameter(torch.zeros(1))]}]
    assert make_optimizer(TrainConfig(optimizer="sgd", momentum=0.9), params).defaults["momentum"] == 0.0
    params = [{"params": [nn.Parameter(torch.zeros(1))]}]
    assert make_optimizer(TrainConfig(optimizer="sgd_momentum", momentum=0.7), params).defaults["momentum"] == 0.7
    assert state_copies("sgd") == 0 and state_copies("SGD-momentum") == 1 and state_copies("adamw") == 2
    assert all(OPTIMIZER_TABLE[n].constructor for n in CHOICES)
    with pytest.raises(ValueError, match="not one the workbench trains with"):
        OPTIMIZER_TABLE["rmsprop"].build(params, TrainConfig())
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'"):
        optimizer_kind("lamb")

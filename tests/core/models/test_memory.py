"""Tests of workbench.core.models.memory and `inspect --dtype`."""

from __future__ import annotations

import json

import pytest

from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.core.models.memory import estimate_memory


def test_fp32_adamw_matches_the_counts_of_the_plan_engine():
    est = estimate_memory(total=1000, trainable=100, dtype="fp32", optimizer="adamw")
    assert (est.param_bytes, est.grad_bytes, est.optimizer_bytes) == (4000, 400, 800)
    assert est.total_bytes == 5200 and est.full_ft_bytes == 16000


@pytest.mark.parametrize(("optimizer", "state"), [("sgd", 0), ("sgd_momentum", 200), ("adam", 400)])
def test_bf16_by_optimizer(optimizer, state):
    est = estimate_memory(total=1000, trainable=100, dtype="bf16", optimizer=optimizer)
    assert (est.param_bytes, est.grad_bytes, est.optimizer_bytes) == (2000, 200, state)


def test_fp32_state_for_mixed_precision_and_torch_dtype_names():
    est = estimate_memory(1000, 100, "torch.float16", "adamw", state_dtype="float32", fixed=50)
    assert est.dtype == "fp16" and est.state_dtype == "fp32"
    assert (est.param_bytes, est.optimizer_bytes) == (2100, 800)


def test_llama_7b_last_block_fits_24_gb_in_bf16_not_full_fine_tuning():
    est = estimate_memory(6_738_415_616, 202_383_360, "bf16", "adamw")
    assert est.fits(24e9) and not est.full_ft_bytes <= 24e9
    assert est.to_dict()["fits"] == {"24GB": True, "80GB": True}


@pytest.mark.parametrize("kwargs", [{"dtype": "int8"}, {"optimizer": "lion9"}, {"trainable": 2000}])
def test_bad_input(kwargs):
    args = {"total": 1000, "trainable": 10, **kwargs}
    with pytest.raises(WorkbenchError):
        estimate_memory(**args)


def test_inspect_dtype(capsys):
    assert main(["inspect", "resnet18", "--num-classes", "10", "--dtype", "bf16", "--depth", "0"]) == 0
    out = capsys.readouterr().out
    assert "Training memory (adamw, bf16): params 22 MB" in out and "80 GB: yes" in out
    assert main(["inspect", "resnet18", "--dtype", "fp16", "--optimizer", "sgd", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)["memory"]
    assert mem["dtype"] == "fp16" and mem["optimizer_bytes"] == 0

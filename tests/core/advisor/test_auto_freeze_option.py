"""Auto-freeze as an advisor candidate: full fine-tuning's peak, the step time falling to the plan it ends in."""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from workbench.cli import main
from workbench.core.advisor.advice import advise
from workbench.core.advisor.auto_freeze_option import auto_freeze_option
from workbench.core.advisor.profile import profile_model
from workbench.core.training.config import TrainConfig
from workbench.core.training.engine import Trainer


def test_resnet18_auto_freeze_ends_as_the_layer4_candidate(resnet18) -> None:
    advice = advise(resnet18, 10**12, (8, 3, 64, 64))
    af = advice.auto_freeze
    assert af is not None
    full = next(a for a in advice.assessed if a.candidate.kind == "full")
    layer4 = next(a for a in advice.assessed if a.candidate.name.startswith("last 1 block (layer4)") and not a.candidate.bn_eval)
    # the engine's blocks: layer1.0 .. layer4.1; at most 0.75 of them freeze
    assert (af.blocks, af.max_frozen, af.last_frozen) == (8, 6, "layer3.1")
    assert af.peak_bytes == full.memory.peak and af.fits  # it starts as full fine-tuning
    assert af.trainable_start == full.trainable_params
    assert af.trainable_end == layer4.trainable_params  # what is left: layer4 and the head
    assert af.step_ratio_start == 1.0 and abs(af.step_ratio_end - layer4.step_ratio) < 1e-9
    assert af.cached_step_ratio_end is not None and layer4.cached_step_ratio is not None
    assert abs(af.cached_step_ratio_end - layer4.cached_step_ratio) < 1e-9
    assert af.cached_step_ratio_end < af.step_ratio_end < 1.0
    d = advice.to_dict()["auto_freeze"]
    assert d["train"] == {"auto_freeze": True, "auto_freeze_max": 0.75}
    assert d["predicted"]["peak_bytes"] == full.memory.peak and d["trainable_params"] == [af.trainable_start, af.trainable_end]
    tight = advise(resnet18, full.memory.peak - 1, (8, 3, 64, 64)).auto_freeze
    assert tight is not None and not tight.fits  # its peak is full fine-tuning's: over a budget full does not fit


def test_no_option_where_nothing_can_freeze() -> None:
    one = nn.Sequential(nn.Linear(4, 4))
    assert auto_freeze_option(one, profile_model(one, (2, 4)), 10**9) is None  # a single block
    two = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    prof = profile_model(two, (2, 4))
    assert auto_freeze_option(two, prof, 10**9, max_fraction=0.4) is None  # floor(0.4 * 2) = 0 blocks
    opt = auto_freeze_option(two, prof, 10**9)
    assert opt is not None and opt.max_frozen == 1 and opt.trainable_end == 4 * 2 + 2
    # the two front layers it may freeze hold under 1 % of the compute: a run would freeze nothing
    light_front = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 256), nn.Linear(256, 256))
    assert auto_freeze_option(light_front, profile_model(light_front, (2, 2)), 10**9) is None


def test_predicted_end_matches_what_a_run_freezes() -> None:
    """A run whose threshold flattens every block freezes as far as --auto-freeze-max allows:
    the trainable count it ends with is the advisor's."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    af = auto_freeze_option(model, profile_model(model, (8, 3, 16, 16)), 10**12)
    assert af is not None
    # 16 px and SGD: the blocks and their parameter counts are resnet18's at any size and with any optimizer
    cfg = TrainConfig(data="synthetic:16", image_size=16, batch_size=8, steps=8, device="cpu", seed=0, optimizer="sgd",
                      auto_freeze=True, auto_freeze_every=2, auto_freeze_threshold=1e9, cache_frozen="off")
    t = Trainer(cfg, model=model)
    last = None
    for m in t.steps():
        last = m
    assert t.result is not None and t.result.ok and last is not None
    assert last.trainable_params == af.trainable_end


def test_cli_table_has_an_auto_freeze_row(capsys) -> None:
    rc = main(["advise", "resnet18", "--image-size", "64", "--batch-size", "8", "--device", "cpu", "--memory", "4GB"])
    out = capsys.readouterr().out
    assert rc == 0
    row = next(line for line in out.splitlines() if "auto-freeze (up to 6 of 8 blocks, through layer3.1)" in line)
    assert "→" in row and "yes" in row


def _uneven() -> nn.Module:
    """CREPE tiny's shape in small: two heavy convolutions, each followed by a cheap normalisation, a light
    convolution and a head. The blocks are the six layers with parameters; at --auto-freeze-max 0.75 four may
    freeze, but the run stops after block 2, the last one worth freezing (0 and 2 hold nearly all the compute)."""
    return nn.Sequential(nn.Conv1d(4, 16, 17, padding=8), nn.BatchNorm1d(16), nn.Conv1d(16, 8, 17, padding=8),
                         nn.BatchNorm1d(8), nn.Conv1d(8, 2, 3, padding=1), nn.Flatten(), nn.Linear(64, 3))


def test_the_name_and_the_predicted_end_are_where_the_cost_rule_stops_the_run() -> None:
    torch.manual_seed(0)
    model = _uneven()
    af = auto_freeze_option(model, profile_model(model, (4, 4, 32)), 10**9)
    assert af is not None and (af.cap, af.max_frozen, af.blocks) == (4, 3, 6)
    assert af.name == "full fine-tuning, auto-freeze (up to 3 of 6 blocks, through 2)"
    assert af.stop_reason.startswith("the block after 2 that --auto-freeze-max 0.75 allows would save too little")
    assert af.trainable_end == sum(p.numel() for p in model[3:].parameters())  # blocks 3, 4 and the head train
    # every block flattens at once (threshold 1e9): the run freezes as far as its rule lets it
    cfg = TrainConfig(data="synthetic:16", input_shape=(4, 32), num_classes=3, batch_size=4, steps=8, device="cpu",
                      seed=0, optimizer="sgd", auto_freeze=True, auto_freeze_every=2, auto_freeze_threshold=1e9,
                      cache_frozen="off")
    t = Trainer(cfg, model=model)
    seen = list(t.steps())
    assert t.result is not None and t.result.ok, t.result and t.result.message
    assert seen[-1].trainable_params == af.trainable_end
    assert t.result.summary["auto_freeze"]["frozen_blocks"] == af.max_frozen
    assert advise(model, 10**9, (4, 4, 32)).to_dict()["auto_freeze"]["max_frozen"] == af.max_frozen

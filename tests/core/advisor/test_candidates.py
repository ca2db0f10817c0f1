"""Candidates come from the model's structure, are valid plans, and predict sane costs."""

import pytest
import torch
import torchvision

from workbench.core.advisor.candidates import block_sequence, generate_candidates, trainable_names
from workbench.core.advisor.memory import estimate_memory
from workbench.core.advisor.predict import step_ratio
from workbench.core.advisor.profile import AdvisorError, profile_model
from workbench.core.models.tree import ModelTree
from workbench.core.plan import FreezePlan


def _meta(name: str) -> torch.nn.Module:
    with torch.device("meta"):
        return torchvision.models.get_model(name, weights=None)


@pytest.fixture(scope="module")
def r18():
    model = torchvision.models.resnet18(weights=None)
    return model, profile_model(model, (8, 3, 64, 64))


@pytest.fixture(scope="module")
def vit():
    model = _meta("vit_b_16")
    return model, profile_model(model, (2, 3, 224, 224))


def test_resnet_blocks_are_its_stages(r18):
    model, prof = r18
    assert block_sequence(model, prof) == ["layer1", "layer2", "layer3", "layer4"]


def test_vit_blocks_are_its_encoder_layers_in_order(vit):
    model, prof = vit
    blocks = block_sequence(model, prof)
    assert blocks == [f"encoder.layers.encoder_layer_{i}" for i in range(12)]


def test_blocks_follow_execution_not_registration_order():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.late = torch.nn.Sequential(torch.nn.Linear(8, 8))
            self.early = torch.nn.Sequential(torch.nn.Linear(4, 8))
            self.fc = torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.fc(self.late(self.early(x)))

    model = Net()
    assert block_sequence(model, profile_model(model, (3, 4))) == ["early", "late"]


@pytest.mark.parametrize("fixture", ["r18", "vit"])
def test_candidates_are_valid_plans_for_the_model(fixture, request):
    model, prof = request.getfixturevalue(fixture)
    cands = generate_candidates(model, prof)
    kinds = [c.kind for c in cands if not c.bn_eval]
    # ViT blocks hold linear layers, ResNet stages convolutions: low rank adapts both, at
    # ranks 4, 16 and 64, then DoRA at 16, then full-rank A+B on the same layers
    low_rank = ["low_rank"] * 4 + ["full_rank"]
    # the stem makes k = n differ from full fine-tuning
    assert kinds == ["head"] + ["last_k"] * len(block_sequence(model, prof)) + low_rank + ["full"]
    adapted = [c.name.partition(" on ")[::2] for c in cands if c.kind in ("low_rank", "full_rank")]
    assert [what for what, _ in adapted] == ["low-rank A+B r=4", "low-rank A+B r=16", "low-rank A+B r=64",
                                             "DoRA r=16", "full-rank A+B"]
    assert len({where for _, where in adapted}) == 1  # the same layers
    assert not any(c.bn_eval and c.kind in ("low_rank", "full_rank") for c in cands)
    for c in cands:
        c.plan.validate(model, strict=True)
        again = FreezePlan.from_dict(c.plan.to_dict())  # schema v1 round trip
        assert again.to_dict() == c.plan.to_dict()
    names = {n for n, _ in model.named_parameters()}
    assert trainable_names(next(c for c in cands if c.kind == "full"), model) == names


def test_resnet_candidates_train_what_their_name_says(r18):
    model, prof = r18
    cands = {c.name: c for c in generate_candidates(model, prof)}
    head = trainable_names(cands["head only"], model)
    assert head == {"fc.weight", "fc.bias"}
    last1 = trainable_names(cands["last 1 block (layer4) + head"], model)
    assert last1 == {n for n, _ in model.named_parameters() if n.startswith(("layer4.", "fc."))}
    tree = ModelTree.from_model(model)  # a caller's tree gives the same names as the model's own
    assert all(trainable_names(c, model, tree) == trainable_names(c, model) for c in cands.values())
    bn = cands["last 1 block (layer4) + head · BN eval"]
    eff = bn.plan.resolve(model)
    assert eff["layer4.0.bn1"].bn_eval and not eff["layer4.0.bn1"].frozen


@pytest.mark.parametrize("fixture", ["r18", "vit"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_more_trainable_blocks_never_predict_less(fixture, optimizer, request):
    model, prof = request.getfixturevalue(fixture)
    cands = [c for c in generate_candidates(model, prof, ranks=(), dora_ranks=(), full_rank=False)
             if not c.bn_eval]  # head, last 1..n-1, full
    peaks, ratios = [], []
    for c in cands:
        names = trainable_names(c, model)
        peaks.append(estimate_memory(prof, names, optimizer=optimizer).peak)
        ratios.append(step_ratio(prof, names, optimizer))
    assert peaks == sorted(peaks), peaks
    assert ratios == sorted(ratios) and ratios[-1] == pytest.approx(1.0)


def test_frozen_prefix_keeps_no_activations(r18):
    model, prof = r18
    full = estimate_memory(prof, {n for n, _ in model.named_parameters()})
    head = estimate_memory(prof, {"fc.weight", "fc.bias"})
    nothing = estimate_memory(prof, set())
    assert nothing.activations == 0 and nothing.gradients == 0
    assert head.activations < full.activations / 100
    assert full.activations == sum(s.nbytes for s in prof.saved)


def test_profile_is_shape_only_and_leaves_the_model_alone(r18):
    model, prof = r18
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert prof.param_bytes == sum(p.numel() * 4 for p in model.parameters())
    assert prof.total_flops > 2 * 1.8e9 * (64 / 224) ** 2 * 8 * 0.9  # resnet18: 1.8 GMACs at 224 px


def test_a_model_that_rejects_the_input_is_one_error():
    with pytest.raises(AdvisorError, match="--input-shape"):
        profile_model(torch.nn.Linear(4, 2), (2, 3, 8, 8))


def test_dora_candidates_train_u_v_and_the_magnitude(vit):
    from workbench.core.advisor.adapters import adapted_meta_copy

    model, prof = vit
    cands = [c for c in generate_candidates(model, prof, ranks=(), dora_ranks=(4,)) if c.kind == "low_rank"]
    assert [c.name.split(" r=")[0] for c in cands] == ["DoRA"]
    applied_names = trainable_names(cands[0], model)  # the plan applied to a meta copy
    assert adapted_meta_copy(model, cands[0])[1] == applied_names  # the advisor's fast copy agrees
    assert {n.rpartition(".")[2] for n in applied_names if ".wb_lowrank." in n} == {"U", "V", "M"}


def test_low_rank_candidates_leave_out_grouped_convolutions():
    # MobileNet's blocks hold depthwise convolutions (groups = channels), which low-rank A+B does not
    # adapt: the candidates name only its pointwise ones, and each applies, instead of the first
    # depthwise layer refusing the whole advice
    model = torchvision.models.mobilenet_v3_small(weights=None)
    prof = profile_model(model, (2, 3, 32, 32))
    cands = [c for c in generate_candidates(model, prof, ranks=(4,)) if c.kind == "low_rank"]
    assert cands
    for c in cands:
        adapted = {n.split(".wb_lowrank.")[0] for n in trainable_names(c, model) if ".wb_lowrank." in n}
        assert adapted, c.name
        convs = [model.get_submodule(p) for p in adapted if isinstance(model.get_submodule(p), torch.nn.Conv2d)]
        assert convs and all(m.groups == 1 for m in convs)
        assert any(m.groups > 1 for m in model.modules() if isinstance(m, torch.nn.Conv2d))  # there were some


def test_full_rank_candidate_trains_b_as_large_as_each_weight_and_keeps_a_fixed(r18):
    from workbench.core.advisor.adapters import full_rank_names

    model, prof = r18
    cand = next(c for c in generate_candidates(model, prof) if c.kind == "full_rank")
    assert cand.name == "full-rank A+B on the conv layers of 4 blocks + head" and cand.k == 4
    trains, anchored = full_rank_names(model, cand)
    assert trainable_names(cand, model) == trains
    convs = {p for p, m in model.named_modules() if p.startswith("layer") and isinstance(m, torch.nn.Conv2d)}
    assert {n.rpartition(".")[0] for n in anchored} == convs  # every conv of the blocks, downsample too
    assert trains - anchored == {"fc.weight", "fc.bias"}  # the head trains plainly; BatchNorm stays frozen
    spec = next(r.reparam for r in cand.plan.rules if r.reparam is not None)
    assert spec.rank is None and spec.mode == "fused" and spec.starts_at_loaded

"""The advisor on timm, Hugging Face and py: models: token batches, transformer blocks, valid
plans, one-line errors, and a Llama-7B-shaped config on the meta device."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from tests.core.models.hf_fixtures import save_folder, tiny_bert, tiny_gpt2
from tests.core.models.test_meta import LLAMA_7B
from workbench.cli import main
from workbench.core.advisor import advise, block_sequence, profile_model, trainable_names
from workbench.core.advisor.front import Point, choose
from workbench.core.advisor.sizes import parse_size
from workbench.core.models.sources import build_from_source
from workbench.core.plan import FreezePlan

pytest.importorskip("transformers")


def _json(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc in (0, 1) else None), err


@pytest.mark.parametrize("make", [tiny_bert, tiny_gpt2], ids=["bert", "gpt2"])
def test_text_model_blocks_are_its_transformer_layers(make):
    model = make()
    prof = profile_model(model, (2, 16))
    blocks = block_sequence(model, prof)
    assert blocks == (["bert.encoder.layer.0", "bert.encoder.layer.1"] if "bert" in type(model).__name__.lower()
                      else ["transformer.h.0", "transformer.h.1"])
    # token ids and labels (per sequence or per token) are the batch
    assert prof.input_bytes == (2 * 16 + (2 if "Bert" in type(model).__name__ else 2 * 16)) * 8


@pytest.mark.parametrize("make", [tiny_bert, tiny_gpt2], ids=["bert", "gpt2"])
def test_text_candidates_are_valid_plans_that_train_what_they_predict(make):
    model = make()
    advice = advise(model, 10**9, (2, 16))
    kinds = {a.candidate.kind for a in advice.assessed}
    assert kinds == {"head", "last_k", "low_rank", "full_rank", "full"}
    for a in advice.assessed:
        plan = FreezePlan.from_dict(a.candidate.plan.to_dict())
        plan.validate(model, strict=True)
        real = make()
        applied = plan.apply(real)
        trains = sum(p.numel() for p in real.parameters() if p.requires_grad)
        assert trains == a.trainable_params, a.candidate.name
        applied.remove()
    # the head of a language model is tied to its input embedding: "head only" trains that tensor
    head = next(a for a in advice.assessed if a.candidate.kind == "head")
    assert head.trainable_params > 0


def test_hf_folder_from_config_needs_seq_len_and_gives_json(capsys, tmp_path):
    folder = save_folder(tiny_bert(), tmp_path / "bert", weights="none")
    rc, data, err = _json(capsys, ["advise", f"hf:{folder}", "--memory", "1GB", "--batch-size", "4"])
    assert rc == 2 and "--seq-len" in err and len(err.strip().splitlines()) == 1
    rc, data, _ = _json(capsys, ["advise", f"hf:{folder}", "--memory", "1GB", "--batch-size", "4",
                                 "--seq-len", "16", "--device", "cpu", "--json"])
    assert rc == 0
    chosen = data["candidates"][data["chosen"]]
    assert chosen["fits"] and chosen["name"] == "full fine-tuning"


def test_text_budget_below_the_weights_is_one_line(capsys, tmp_path):
    folder = save_folder(tiny_gpt2(), tmp_path / "gpt2", weights="none")
    rc = main(["advise", f"hf:{folder}", "--memory", "1000", "--seq-len", "8", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "below the model's own weights" in err and "smallest plan needs" in err


def test_timm_model(capsys, monkeypatch):
    pytest.importorskip("timm")
    from workbench.commands import advise as advise_command

    advised = []  # the advice the command computed: every candidate, not only its front
    real_advise = advise_command.advise
    monkeypatch.setattr(advise_command, "advise", lambda *a, **kw: advised.append(real_advise(*a, **kw)) or advised[-1])
    rc, data, _ = _json(capsys, ["advise", "timm:vit_tiny_patch16_224", "--memory", "2GB", "--batch-size", "2",
                                 "--device", "cpu", "--json"])
    assert rc == 0
    model = build_from_source("timm", "vit_tiny_patch16_224", meta=True)
    prof = profile_model(model, (2, 3, 224, 224))
    assert block_sequence(model, prof) == [f"blocks.{i}" for i in range(12)]
    names = [c["name"] for c in data["candidates"]]
    (advice,) = advised
    assert any(a.candidate.name.startswith("low-rank A+B") for a in advice.assessed)
    for c in data["candidates"]:
        FreezePlan.from_dict(c["plan"]).validate(model, strict=True)
    assert names


def test_py_model(capsys, tmp_path, monkeypatch):
    (tmp_path / "mynet.py").write_text(textwrap.dedent("""
        import torch.nn as nn

        def build(num_classes=None):
            blocks = [nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(3)]
            return nn.Sequential(nn.Flatten(), nn.Linear(48, 16), *blocks, nn.Linear(16, num_classes or 4))
    """))
    monkeypatch.chdir(tmp_path)
    rc, data, _ = _json(capsys, ["advise", "py:mynet.py:build", "--memory", "1GB", "--batch-size", "4",
                                 "--image-size", "4", "--device", "cpu", "--json"])
    assert rc == 0, data
    assert data["candidates"][data["chosen"]]["name"] == "full fine-tuning"


def test_llama_7b_config_on_meta_gets_plans_for_24_and_80_gb(capsys, tmp_path):
    folder = tmp_path / "llama7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_7B))
    rc, data, _ = _json(capsys, ["advise", f"hf:{folder}", "--memory", "24GB", "--amp", "bf16", "--dtype", "bf16",
                                 "--seq-len", "512", "--batch-size", "1", "--device", "cuda", "--json"])
    assert rc == 0
    front = data["candidates"]
    assert "head" in {d["name"].split(" ")[0] for d in front}
    # The candidates and their predictions do not depend on the budget, only the choice among them does
    # (advise() profiles a 7B model for about 8 s of CPU): 80 GB is chosen from the same front by the
    # advisor's own rule rather than by profiling it all again.
    points = [Point(c["predicted"]["peak_bytes"], c["trainable_params"], c["predicted"]["step_ratio"]) for c in front]
    assert choose(points, data["budget_bytes"]) == data["chosen"]
    chosen = {"24GB": front[data["chosen"]], "80GB": front[choose(points, parse_size("80GB"))]}
    for budget, c in chosen.items():
        assert c["predicted"]["peak_bytes"] <= parse_size(budget)
    assert chosen["24GB"]["fits"] and data["budget_bytes"] == parse_size("24GB")
    # bf16 weights alone are 13.5 GB; 24 GB trains a few blocks, 80 GB far more
    assert 2 * 10**8 < chosen["24GB"]["trainable_params"] < chosen["80GB"]["trainable_params"]
    assert chosen["24GB"]["predicted"]["peak_bytes"] > 13.4e9


def test_low_rank_trainable_names_match_the_applied_plan():
    model = tiny_bert()
    advice = advise(model, 10**9, (2, 16))
    lr = next(a for a in advice.assessed if a.candidate.kind == "low_rank")
    names = trainable_names(lr.candidate, model)
    assert names and all(".wb_lowrank.weight." in n or n.startswith("classifier.") for n in names)
    assert lr.trainable_params == sum(
        p.numel() for n, p in _applied(model, lr.candidate.plan).named_parameters() if n in names)


def _applied(model: torch.nn.Module, plan: FreezePlan) -> torch.nn.Module:
    from workbench.core.advisor.profile import meta_copy

    meta = meta_copy(model)
    plan.apply(meta)
    return meta

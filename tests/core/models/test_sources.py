"""Tests of workbench.core.models.sources: spec parsing, the timm, Hugging Face and py
sources, plan model blocks, and bad input as one line with exit code 2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.core.models.hf_fixtures import save_folder, tiny_bert, tiny_gpt2
from workbench.cli import main
from workbench.core.models.build_request import missing_extra_message, require_extra
from workbench.core.models.sources import (
    SOURCES,
    Browse,
    build_from_source,
    is_structure_only,
    model_block,
    parse_model_spec,
    search_models,
)
from workbench.core.models.spec import ModelSpec
from workbench.core.models.tree import ModelTree
from workbench.core.models.zoo import ModelSourceError
from workbench.core.plan.rules import FreezePlan


def _n(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------ specs


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("resnet18", ("torchvision", "resnet18")),
        ("torchvision:resnet18", ("torchvision", "resnet18")),
        ("timm:vit_tiny_patch16_224", ("timm", "vit_tiny_patch16_224")),
        ("hf:./my-bert", ("hf", "./my-bert")),
        ("hf:org/repo", ("hf", "org/repo")),
        ("py:my_models:build", ("py", "my_models:build")),
        ("py:path/to/net.py:make", ("py", "path/to/net.py:make")),
    ],
)
def test_parse_model_spec(text, expected):
    assert parse_model_spec(text) == expected


@pytest.mark.parametrize("text", ["", "  ", "timm:", "hf: "])
def test_parse_model_spec_rejects_empty(text):
    with pytest.raises(ModelSourceError, match="model"):
        parse_model_spec(text)


def test_table_rows_and_plan_block():
    assert set(SOURCES) == {"torchvision", "timm", "hf", "py"}
    assert SOURCES["py"].runs_code and not SOURCES["timm"].runs_code
    assert SOURCES["timm"].extra == "timm" and SOURCES["hf"].extra == "hf"
    assert model_block("timm", "resnet18") == {"source": "timm", "name": "resnet18"}
    with pytest.raises(ModelSourceError, match="unknown"):
        model_block("keras", "x")


def test_every_row_says_how_the_app_offers_it(tmp_path):
    for key, row in SOURCES.items():
        assert row.label and row.placeholder, key
        assert (row.own_weights is None) != (row.downloads is None), key  # weights: chosen (maybe downloaded) or own
        assert row.browse is None or row.browse.kind in ("folder", "file", "code"), key
    assert [k for k, row in SOURCES.items() if row.browse is not None] == ["hf", "py"]
    assert SOURCES["py"].browse is not None and SOURCES["py"].browse.kind == "code"
    py, hf = SOURCES["py"].browse, SOURCES["hf"].browse
    assert hf is not None and hf.takes(tmp_path) and not hf.takes(tmp_path / "net.py")
    (tmp_path / "net.PY").write_text("", encoding="utf-8")
    assert py.takes(tmp_path / "net.PY") and py.takes("missing.py")  # a name, not a file check
    assert not py.takes(tmp_path) and not py.takes("notes.txt")  # "All files (*)" takes nothing


def test_a_row_that_runs_code_must_confirm_it_before_it_runs():
    py = SOURCES["py"]
    with pytest.raises(ValueError, match="browse kind must be 'code'"):
        dataclasses.replace(py, browse=Browse("file", "Open", "Choose a file", "Open Code…", "Run a file", "Python files (*.py)"))


def test_prefixed_name_moves_to_its_source():
    spec = ModelSpec(name="timm:resnet18")
    assert (spec.source, spec.name) == ("timm", "resnet18")
    assert ModelSpec.from_dict({"source": "hf", "name": "x/y"}).to_dict()["source"] == "hf"


def test_missing_extra_is_one_line_naming_pip():
    msg = missing_extra_message("timm", "timm")
    assert "pip install 'freeze-workbench[timm]'" in msg and "\n" not in msg
    with pytest.raises(ModelSourceError, match=r"freeze-workbench\[hf\]"):
        require_extra("no_such_module_for_workbench", "hf")


# ------------------------------------------------------------------ timm


def test_timm_counts_match_timm_and_num_classes_resets_head():
    import timm

    model = build_from_source("timm", "resnet10t", num_classes=7)
    ref = timm.create_model("resnet10t", pretrained=False, num_classes=7)
    assert ModelTree.from_model(model).root.total_params == _n(ref)
    assert model.get_classifier().out_features == 7


def test_timm_unknown_name_suggests():
    with pytest.raises(ModelSourceError, match="did you mean.*resnet18"):
        build_from_source("timm", "resnt18")


def test_timm_pretrained_needs_cache_when_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(ModelSourceError, match="not in the local cache"):
        build_from_source("timm", "resnet10t", weights="DEFAULT", allow_download=False)


def test_timm_reads_cached_weights_with_safetensors(tmp_path, monkeypatch):
    import timm
    from safetensors.torch import save_file

    src = timm.create_model("resnet10t", pretrained=False)
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(path))
    monkeypatch.setattr("workbench.core.models.timm_models._cached_file", lambda name: path)
    model = build_from_source("timm", "resnet10t", weights="DEFAULT", allow_download=False)
    assert torch.equal(model.conv1[0].weight, src.conv1[0].weight)
    assert search_models("timm", "resnet10t") == [("resnet10t", True)]


def test_timm_meta_allocates_nothing():
    model = build_from_source("timm", "vit_tiny_patch16_224", num_classes=5, meta=True)
    assert all(p.is_meta for p in model.parameters())
    assert model.get_classifier().out_features == 5


# ------------------------------------------------------------------ Hugging Face


def test_hf_folder_loads_safetensors_weights(tmp_path):
    ref = tiny_bert()
    folder = save_folder(ref, tmp_path / "bert")
    model = build_from_source("hf", str(folder))
    assert type(model).__name__ == "BertForSequenceClassification"
    assert _n(model) == ref.num_parameters()
    name, p = next(iter(ref.named_parameters()))
    assert torch.equal(dict(model.named_parameters())[name], p)
    assert model.training


def test_hf_num_classes_sets_num_labels(tmp_path):
    folder = save_folder(tiny_bert(num_labels=3), tmp_path / "bert")
    model = build_from_source("hf", str(folder), num_classes=11)
    assert model.config.num_labels == 11 and model.classifier.out_features == 11


def test_hf_auto_class_from_architectures(tmp_path):
    folder = save_folder(tiny_gpt2(), tmp_path / "gpt2", weights="none")
    model = build_from_source("hf", str(folder))
    assert type(model).__name__ == "GPT2LMHeadModel"
    assert is_structure_only("hf", str(folder))
    assert not is_structure_only("hf", str(save_folder(tiny_gpt2(), tmp_path / "w")))


def test_hf_pickled_weights_refused_unless_trusted(tmp_path):
    ref = tiny_bert()
    folder = save_folder(ref, tmp_path / "bert", weights="bin")
    with pytest.raises(ModelSourceError, match="pickled.*--trust-pickle"):
        build_from_source("hf", str(folder))
    model = build_from_source("hf", str(folder), trust_pickle=True)
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, ref.bert.embeddings.word_embeddings.weight)


def test_hf_meta_from_config(tmp_path):
    folder = save_folder(tiny_bert(), tmp_path / "bert")
    model = build_from_source("hf", str(folder), meta=True)
    assert all(p.is_meta for p in model.parameters())


def test_hf_repo_not_cached_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelSourceError, match="not in the local cache"):
        build_from_source("hf", "someone/not-cached-model")


# ------------------------------------------------------------------ py


FACTORIES = '''
import torch.nn as nn

def good():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

def boom():
    raise RuntimeError("no GPU here")

def not_a_module():
    return {"weights": 1}
'''


@pytest.fixture
def factory_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_net.py"
    path.write_text(FACTORIES)
    return path


def test_py_file_factory_and_head(factory_file):
    model = build_from_source("py", f"{factory_file}:good", num_classes=5)
    assert model[2].out_features == 5


def test_py_module_factory(factory_file, monkeypatch):
    monkeypatch.chdir(factory_file.parent)
    model = ModelSpec(name="py:my_net:good").build()
    assert isinstance(model, nn.Sequential)


def test_py_meta(factory_file):
    model = build_from_source("py", f"{factory_file}:good", meta=True)
    assert all(p.is_meta for p in model.parameters())


# ------------------------------------------------------------------ CLI: one line, exit 2


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("timm:resnt18", "did you mean"),
        ("py:{file}:boom", "raised RuntimeError: no GPU here"),
        ("py:{file}:not_a_module", "returned dict, not a torch.nn.Module"),
        ("py:{file}:missing", "has no function 'missing'"),
        ("py:{file}", "py:MODULE:FACTORY"),
        ("hf:{dir}", "no config.json"),
    ],
)
def test_bad_input_is_one_line_exit_2(spec, words, factory_file, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    spec = spec.format(file=factory_file, dir=tmp_path / "empty")
    assert main(["inspect", spec]) == 2
    assert words in _one_line_error(capsys)


def test_inspect_timm_and_plan_round_trip(tmp_path, capsys):
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({
        "format": "freeze-plan", "version": 1, "model": {"source": "timm", "name": "resnet10t"},
        "rules": [{"select": "*", "frozen": True}, {"select": "fc", "frozen": False}],
    }))
    out = tmp_path / "out.json"
    assert main(["export", "--plan", str(plan), "--num-classes", "4", "--to", str(out)]) == 0
    saved = FreezePlan.load(out)
    assert saved.model["source"] == "timm" and saved.model["name"] == "resnet10t"
    capsys.readouterr()
    assert main(["inspect", "--plan", str(out), "--json"]) == 0  # the plan's model block alone
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["source"] == "timm"
    assert data["counts"]["trainable"] == 512 * 4 + 4
    assert data["fingerprint"] == saved.model["fingerprint"]


def test_inspect_hf_folder_and_meta_flag(tmp_path, capsys):
    ref = tiny_bert()
    folder = save_folder(ref, tmp_path / "bert")
    for extra in ([], ["--meta"]):
        assert main(["inspect", f"hf:{folder}", "--json", *extra]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["counts"]["total"] == ref.num_parameters()
        assert data["model"] == {**data["model"], "source": "hf", "name": str(folder)}


def test_models_command_lists_a_source(capsys):
    assert main(["models", "--source", "timm", "resnet10*"]) == 0
    assert "timm:resnet10t" in capsys.readouterr().out.split()
    assert main(["models", "--source", "timm", "resnet10t", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["source"], r["name"], type(r["cached"])) for r in rows] == [("timm", "resnet10t", bool)]
    assert main(["models", "--source", "timm", "no_such_*"]) == 1


def test_doctor_watches_timm_and_text_models(tmp_path, capsys):
    assert main(["doctor", "--model", "timm:resnet10t", "--num-classes", "3", "--steps", "2", "--batch-size", "2"]) == 0
    assert "watched 2 steps" in capsys.readouterr().out
    folder = save_folder(tiny_bert(), tmp_path / "bert")
    assert main(["doctor", "--model", f"hf:{folder}", "--steps", "2", "--batch-size", "2", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["watch"]["steps"] == 2
    assert "Loading weights" not in out.err


def test_checkpoint_on_top_of_a_timm_model(tmp_path):
    import timm
    from safetensors.torch import save_file

    src = timm.create_model("resnet10t", pretrained=False, num_classes=4)
    path = tmp_path / "ft.safetensors"
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(path))
    model = ModelSpec(source="timm", name="resnet10t", checkpoint=str(path), num_classes=4).build(allow_download=False)
    assert torch.equal(model.fc.weight, src.fc.weight) and torch.equal(model.conv1[0].weight, src.conv1[0].weight)


def test_hf_repo_id_from_the_local_cache_never_touches_the_network(tmp_path, monkeypatch):
    import socket

    repo = tmp_path / "hub" / "models--org--tiny-bert"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    ref = tiny_bert()
    save_folder(ref, repo / "snapshots" / "abc123")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))

    def no_network(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    model = build_from_source("hf", "org/tiny-bert")
    assert _n(model) == ref.num_parameters()
    assert search_models("hf") == [("org/tiny-bert", True)]
    assert not is_structure_only("hf", "org/tiny-bert")

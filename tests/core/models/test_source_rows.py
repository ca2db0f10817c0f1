"""A model source is a row: a throwaway row, added to the table and nothing else, is parsed
from a spec, named in a plan's model block, built through ``ModelSpec``, listed by
``workbench models`` (with its own empty-list line), and built on the meta device for an export
when its row says so."""

from __future__ import annotations

import argparse
import fnmatch

import pytest
from torch import nn

from workbench.commands import models as models_command
from workbench.core.export.script import structure_model
from workbench.core.models.build_request import BuildRequest, device_context
from workbench.core.models.script_code import ScriptModel, ScriptRequest
from workbench.core.models.source_errors import ModelSourceError
from workbench.core.models.sources import SOURCES, ModelSource, model_block, parse_model_spec, search_models
from workbench.core.models.spec import ModelSpec

TOYS = ("toy_small", "toy_wide")


def _build(req: BuildRequest) -> nn.Sequential:
    width = 16 if req.name.endswith("wide") else 4
    with device_context(req.meta):
        return nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, req.num_classes or 2))


def _script(req: ScriptRequest) -> ScriptModel:
    raise ModelSourceError("toy models have no script form")


def _row(names: tuple[str, ...]) -> ModelSource:
    return ModelSource(
        key="toy", description="toy models for the tests", label="Toy", placeholder="toy_small", extra=None,
        build=_build, names=lambda glob: [n for n in names if fnmatch.fnmatch(n, glob or "*")],
        cached=lambda name, weights: True, script=_script, export_on_meta=True,
        empty_names=lambda: "no toy model is installed yet",
    )


def _models(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    models_command.add_arguments(parser)  # its --source choices are the table's rows, read now
    return models_command.run(parser.parse_args(argv))


def test_a_new_row_is_parsed_named_and_built(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(SOURCES, "toy", _row(TOYS))
    assert parse_model_spec("toy:toy_wide") == ("toy", "toy_wide")
    assert model_block("toy", "toy_wide") == {"source": "toy", "name": "toy_wide"}
    spec = ModelSpec(name="toy:toy_wide", num_classes=5)  # a prefixed name moves to its source
    assert (spec.source, spec.name) == ("toy", "toy_wide")
    model = ModelSpec.from_dict(spec.to_dict()).build()
    assert [m.out_features for m in model.modules() if isinstance(m, nn.Linear)] == [16, 5]
    with pytest.raises(ModelSourceError, match="a toy model spec needs a name, e.g. toy:NAME"):
        ModelSpec(source="toy")
    # the exporter reads its structure from a meta build, as the row says
    structure, name = structure_model(ModelSpec(source="toy", name="toy_small"), meta=True)
    assert name == "toy_small" and all(p.is_meta for p in structure.parameters())
    assert [m.out_features for m in structure.modules() if isinstance(m, nn.Linear)] == [4, 2]


def test_a_new_row_is_listed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setitem(SOURCES, "toy", _row(TOYS))
    assert search_models("toy", "*wide") == [("toy_wide", True)]
    assert _models(["--source", "toy", "toy_*"]) == 0
    assert capsys.readouterr().out.splitlines() == ["toy:toy_small  (cached)", "toy:toy_wide  (cached)"]
    assert _models(["--source", "toy", "nothing*"]) == 1
    assert capsys.readouterr().err.strip() == "no toy model matches 'nothing*'"


def test_an_empty_source_says_its_own_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setitem(SOURCES, "toy", _row(()))
    assert _models(["--source", "toy", "toy_*"]) == 0  # nothing to match: not a bad pattern
    assert capsys.readouterr().err.strip() == "no toy model is installed yet"


def test_the_architecture_of_a_spec_comes_from_a_row():
    assert ModelSpec(source="timm", name="resnet10t").architecture_source == "timm"
    assert ModelSpec(source="checkpoint", checkpoint="run.pt").architecture_source == "torchvision"


def test_an_unknown_source_is_refused_in_one_line():
    with pytest.raises(ModelSourceError, match="model source 'toy' is unknown; use one of torchvision, checkpoint"):
        ModelSpec(source="toy", name="toy_small")

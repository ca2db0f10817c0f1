"""The start-up tree description: written after a load, read before torch is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.hostile.makers import Tiny
from workbench.core.models import tree_cache as tc
from workbench.core.models.tree import ModelTree

ROOT = Path(__file__).resolve().parents[3]


def _tree() -> ModelTree:
    torch.manual_seed(0)
    return ModelTree.from_model(Tiny())


def _flat(n: int) -> ModelTree:
    """A tree of a root and ``n`` one-parameter children (no model behind it)."""
    return ModelTree.from_dict({
        "modules": [["", "Root", ["Root"], -1, 0, 0, 0, [], 4]]
        + [[f"m{i}", "Linear", ["Linear"], 0, i + 1, 1, 1, ["weight"], 4] for i in range(n)],
        "parameters": [[f"m{i}.weight", [1], None] for i in range(n)], "fingerprint": "f"})


def test_a_written_tree_reads_back_as_the_same_tree(tmp_path: Path) -> None:
    tree = _tree()
    path = tc.write_tree("torchvision", "tiny", "IMAGENET1K_V1", tree, folder=tmp_path)
    assert path == tc.cache_file("torchvision", "tiny", tmp_path) and path.parent.name == "trees"
    cached = tc.read_tree_checked("torchvision", "tiny", folder=tmp_path)
    assert (cached.source, cached.name, cached.weights) == ("torchvision", "tiny", "IMAGENET1K_V1")
    assert cached.tree.to_dict() == tree.to_dict()  # modules, classes, counts, flags, parameters, fingerprint
    live, read = list(tree.root.walk()), list(cached.tree.root.walk())
    assert [n.path for n in read] == [n.path for n in live]  # the live tree's pre-order
    assert [n.total_params for n in read] == [n.total_params for n in live]
    assert [(n.is_bn, n.type_names) for n in read] == [(n.is_bn, n.type_names) for n in live]
    assert cached.tree.fingerprint == tree.fingerprint and cached.tree.param_shapes == tree.param_shapes


def test_each_model_has_its_own_file_and_another_model_is_not_read(tmp_path: Path) -> None:
    tc.write_tree("torchvision", "a", None, _tree(), folder=tmp_path)
    assert tc.read_tree("torchvision", "b", folder=tmp_path) is None
    assert tc.cache_file("torchvision", "a", tmp_path) != tc.cache_file("timm", "a", tmp_path)
    with pytest.raises(tc.TreeCacheError, match="no tree description of torchvision:b"):
        tc.read_tree_checked("torchvision", "b", folder=tmp_path)


def test_only_models_named_by_their_source_are_kept(tmp_path: Path) -> None:
    tree = _tree()
    for source in ("hf", "py", "checkpoint"):
        assert tc.write_tree(source, "x", None, tree, folder=tmp_path) is None
    assert not (tmp_path / "trees").exists()
    assert tc.startup_model("resnet18") == ("torchvision", "resnet18")
    assert tc.startup_model("timm:resnet10t") == ("timm", "resnet10t")
    assert tc.describable("torchvision") and tc.describable("timm") and not tc.describable("nope")
    assert tc.startup_model("") is None and tc.startup_model("timm:") is None


def test_a_tree_over_the_row_cap_is_not_written(tmp_path: Path) -> None:
    assert tc.write_tree("torchvision", "big", None, _flat(tc.MAX_CACHED_ROWS), folder=tmp_path) is None
    assert not tc.cache_file("torchvision", "big", tmp_path).exists()
    assert tc.write_tree("torchvision", "big", None, _flat(tc.MAX_CACHED_ROWS - 1), folder=tmp_path) is not None
    assert len(tc.read_tree_checked("torchvision", "big", folder=tmp_path).tree) == tc.MAX_CACHED_ROWS


def test_another_version_of_torch_or_the_app_is_not_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tc.write_tree("torchvision", "tiny", None, _tree(), folder=tmp_path)
    versions = tc.library_versions()
    assert versions is not None and set(versions) == {"app", "torch", "torchvision", "timm"}
    assert versions["torch"].split("+")[0] == torch.__version__.split("+")[0]
    monkeypatch.setattr(tc, "library_versions", lambda: dict(versions, torch="0.0.1"))
    with pytest.raises(tc.TreeCacheError, match="other versions"):
        tc.read_tree_checked("torchvision", "tiny", folder=tmp_path)


def test_an_uninstalled_timm_is_a_version_too(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tc._package_version
    monkeypatch.setattr(tc, "_package_version", lambda package: None if package == "timm" else real(package))
    versions = tc.library_versions()
    assert versions is not None and versions["timm"] == "not installed"
    monkeypatch.setattr(tc, "_package_version", lambda package: None)
    assert tc.library_versions() is None  # no torch version: nothing is described


def test_a_rewrite_replaces_the_description_atomically(tmp_path: Path) -> None:
    tc.write_tree("torchvision", "tiny", None, _tree(), folder=tmp_path)
    tc.write_tree("torchvision", "tiny", "W", _flat(1), folder=tmp_path)
    cached = tc.read_tree_checked("torchvision", "tiny", folder=tmp_path)
    assert cached.weights == "W" and len(cached.tree) == 2
    assert [p.name for p in (tmp_path / "trees").iterdir()] == [tc.cache_file("torchvision", "tiny", tmp_path).name]


def test_the_default_folder_follows_the_platform_convention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tc.CACHE_DIR_ENV, raising=False)
    monkeypatch.setattr(tc.sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tc.default_cache_dir() == tmp_path / "FreezeWorkbench" / "Freeze Workbench"
    monkeypatch.setenv(tc.CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert tc.default_cache_dir() == tmp_path / "mine"


def test_reading_a_description_imports_neither_torch_nor_qt(tmp_path: Path) -> None:
    tc.write_tree("torchvision", "tiny", None, _tree(), folder=tmp_path)
    code = (
        "import sys; from workbench.core.models import tree_cache as tc; "
        f"t = tc.read_tree_checked('torchvision', 'tiny', folder={str(tmp_path)!r}); "
        "heavy = [m for m in ('torch', 'torchvision', 'PySide6') if m in sys.modules]; "
        "print(len(t.tree), heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(len(_tree().nodes)), "[]"]


def test_the_file_is_plain_json_of_the_documented_format(tmp_path: Path) -> None:
    tree = _tree()
    path = tc.write_tree("torchvision", "tiny", None, tree, folder=tmp_path)
    assert path is not None
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == tc.TREE_CACHE_FORMAT and data["version"] == 2
    assert data["model"] == {"source": "torchvision", "name": "tiny", "weights": None}
    assert data["tree"]["modules"][0] == ["", "Tiny", ["Tiny"], -1, 0, 0, 0, [], 4]
    assert data["tree"]["fingerprint"] == tree.fingerprint


def test_only_the_most_recently_written_descriptions_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tc, "MAX_CACHED_MODELS", 2)
    tree = _flat(0)
    for name in ("a", "b"):
        tc.write_tree("torchvision", name, None, tree, folder=tmp_path)
    os.utime(tc.cache_file("torchvision", "a", tmp_path), ns=(1, 1))  # "a" is the older
    os.utime(tc.cache_file("torchvision", "b", tmp_path), ns=(2, 2))
    (tmp_path / "trees" / "notes.txt").write_text("not a description", encoding="utf-8")
    tc.write_tree("torchvision", "c", None, tree, folder=tmp_path)
    assert tc.read_tree("torchvision", "a", folder=tmp_path) is None
    assert tc.read_tree("torchvision", "b", folder=tmp_path) is not None
    assert tc.read_tree("torchvision", "c", folder=tmp_path) is not None
    assert (tmp_path / "trees" / "notes.txt").is_file()  # only descriptions are removed

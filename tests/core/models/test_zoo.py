"""Tests of workbench.core.models.zoo: registry, heads, offline downloads and checkpoint loading."""

from __future__ import annotations

import functools
import hashlib
import socket
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.fixtures.models import Tied
from tests.timeouts import OFFLINE_FAILURE_S
from workbench.core.models.spec import ModelSpec
from workbench.core.models.zoo import (
    LoadResult,
    ModelSourceError,
    build_model,
    current_num_classes,
    find_head,
    list_models,
    load_checkpoint,
    model_input_size,
    replace_head,
    save_checkpoint,
    weights_cache_path,
    weights_cached,
)


@pytest.fixture(autouse=True)
def _empty_torch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test sees an empty torch hub cache, so nothing real is read or written."""
    home = tmp_path / "torch_home"
    monkeypatch.setenv("TORCH_HOME", str(home))
    return home


class Tiny(nn.Module):
    """A small classifier with a BatchNorm buffer, for fast checkpoint tests."""

    def __init__(self, num_classes: int = 3) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(self.conv(x)).mean((2, 3)))


def _randomized(model: nn.Module, seed: int = 1) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(torch.randn(tensor.shape, generator=gen))
    return model


def _assert_same_state(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


# ---------------------------------------------------------------------------- registry


def test_list_models_builds_and_downloads_nothing_and_describes_resnet18(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    original = nn.Module.__init__

    def counting_init(self: nn.Module, *args: object, **kwargs: object) -> None:
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("list_models downloaded")

    monkeypatch.setattr(nn.Module, "__init__", counting_init)
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_download)
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_download)
    infos = list_models()
    assert built == []  # what makes it quick: no model is instantiated
    by_name = {info.name: info for info in infos}
    r18 = by_name["resnet18"]
    assert "IMAGENET1K_V1" in r18.weights
    assert "DEFAULT" not in r18.weights
    assert r18.default_weights == "IMAGENET1K_V1"
    assert r18.num_params == 11_689_512
    assert r18.cached == {"IMAGENET1K_V1": False}
    assert r18.input_size == 224
    assert r18.num_classes == 1000
    assert by_name["inception_v3"].input_size == 299
    # detection/segmentation models are not classification models
    assert "fasterrcnn_resnet50_fpn" not in by_name


def test_model_input_size() -> None:
    assert model_input_size("resnet18") == 224
    assert model_input_size("inception_v3") == 299
    with pytest.raises(ModelSourceError, match="resnet18"):
        model_input_size("resnt18")


def test_weights_cached_sees_files_in_hub_cache(_empty_torch_home: Path) -> None:
    path = weights_cache_path("resnet18", "DEFAULT")
    assert path.parent == _empty_torch_home / "hub" / "checkpoints"
    assert path.name.startswith("resnet18-") and path.suffix == ".pth"
    assert not weights_cached("resnet18", "IMAGENET1K_V1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x")
    assert weights_cached("resnet18", "IMAGENET1K_V1")
    info = {i.name: i for i in list_models()}["resnet18"]
    assert info.cached["IMAGENET1K_V1"] is True


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_build_model_random_init(name: str) -> None:
    model = build_model(name, weights=None)
    assert current_num_classes(model) == 1000
    model = build_model(name, weights=None, num_classes=5)
    assert current_num_classes(model) == 5


def test_build_model_unknown_name_suggests_close_names() -> None:
    with pytest.raises(ModelSourceError) as info:
        build_model("resnet_18")
    assert "resnet18" in str(info.value)


def test_build_model_unknown_weights_lists_valid_ones() -> None:
    with pytest.raises(ModelSourceError) as info:
        build_model("resnet18", weights="IMAGENET1K_V9")
    message = str(info.value)
    assert "IMAGENET1K_V9" in message and "IMAGENET1K_V1" in message and "None" in message


def test_build_model_not_cached_without_download(_empty_torch_home: Path) -> None:
    with pytest.raises(ModelSourceError) as info:
        build_model("resnet18", "IMAGENET1K_V1", allow_download=False)
    message = str(info.value)
    assert "not in cache" in message
    assert str(_empty_torch_home) in message
    assert "weights=None" in message


def test_build_model_offline_download_fails_fast_with_url_and_path(
    _empty_torch_home: Path,
) -> None:
    """The test machine has no network: the real download must fail quickly and clearly."""
    try:
        socket.create_connection(("download.pytorch.org", 443), timeout=3).close()
    except OSError:
        pass
    else:  # pragma: no cover - depends on the machine
        pytest.skip("network is reachable; this test checks the offline path")
    previous_timeout = socket.getdefaulttimeout()
    start = time.perf_counter()
    with pytest.raises(ModelSourceError) as info:
        build_model("resnet18", "IMAGENET1K_V1")
    assert time.perf_counter() - start < OFFLINE_FAILURE_S
    message = str(info.value)
    assert "https://download.pytorch.org/models/resnet18-" in message
    assert str(_empty_torch_home / "hub" / "checkpoints") in message
    assert socket.getdefaulttimeout() == previous_timeout
    # no partial file is left in the cache
    checkpoints = _empty_torch_home / "hub" / "checkpoints"
    assert not checkpoints.exists() or not any(checkpoints.iterdir())


def test_build_model_download_timeout_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[object, float | None]] = []

    def stalled(*args: object, timeout: object = None, **kwargs: object) -> None:
        seen.append((timeout, socket.getdefaulttimeout()))
        raise TimeoutError("timed out")

    monkeypatch.setattr(urllib.request, "urlopen", stalled)
    with pytest.raises(ModelSourceError, match="TimeoutError"):
        build_model("resnet18", "IMAGENET1K_V1", download_timeout=7)
    # the timeout is the connection's own: other threads' sockets keep the process default
    assert seen == [(7, socket.getdefaulttimeout())]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    """A local HTTP server with one file: (its URL, its bytes)."""
    import http.server
    import threading

    payload = b"weights" * 1000
    (tmp_path / "serve").mkdir()
    (tmp_path / "serve" / "w.pth").write_bytes(payload)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "serve"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/w.pth", payload
    finally:
        server.shutdown()
        server.server_close()


def test_download_checks_the_hash_in_the_file_name_and_leaves_no_partial_file(
    served: tuple[str, bytes], tmp_path: Path
) -> None:
    from types import SimpleNamespace

    from workbench.core.models.torchvision_models import _download_weights

    url, payload = served
    good = hashlib.sha256(payload).hexdigest()[:8]
    dest = tmp_path / "cache" / f"model-{good}.pth"
    _download_weights(SimpleNamespace(url=url), dest, progress=False, timeout=10)
    assert dest.read_bytes() == payload
    bad = tmp_path / "cache" / "model-00000000.pth"
    with pytest.raises(ModelSourceError, match="integrity check"):
        _download_weights(SimpleNamespace(url=url), bad, progress=False, timeout=10)
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]  # nothing else left


def test_build_model_corrupt_cached_weights_says_delete() -> None:
    path = weights_cache_path("resnet18", "IMAGENET1K_V1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelSourceError) as info:
        build_model("resnet18", "IMAGENET1K_V1", allow_download=False)
    assert str(path) in str(info.value) and "delete" in str(info.value)


# ---------------------------------------------------------------------------- heads


def test_replace_head_resnet18_forward() -> None:
    model = build_model("resnet18")
    old_fc = model.fc
    assert replace_head(model, 7) == ["fc"]
    assert model.fc is not old_fc
    assert model.fc.out_features == 7 and model.fc.in_features == 512
    assert all(p.requires_grad for p in model.fc.parameters())
    model.eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 32, 32))
    assert out.shape == (1, 7)
    # same size again: nothing to do
    fc = model.fc
    assert replace_head(model, 7) == []
    assert model.fc is fc


def test_replace_head_mobilenet_v3_small() -> None:
    model = build_model("mobilenet_v3_small")
    assert replace_head(model, 4) == ["classifier.3"]
    assert model.classifier[3].out_features == 4
    assert model.classifier[0].out_features == 1024  # hidden layer untouched


def test_replace_head_vit_b_16() -> None:
    model = build_model("vit_b_16")
    assert replace_head(model, 3) == ["heads.head"]
    assert model.heads.head.weight.shape == (3, 768)


def test_replace_head_squeezenet_conv() -> None:
    model = build_model("squeezenet1_0")
    assert replace_head(model, 6) == ["classifier.1"]
    conv = model.classifier[1]
    assert isinstance(conv, nn.Conv2d)
    assert conv.out_channels == 6 and conv.kernel_size == (1, 1)
    assert model.num_classes == 6


def test_replace_head_densenet121() -> None:
    model = build_model("densenet121")
    assert replace_head(model, 2) == ["classifier"]
    assert model.classifier.weight.shape == (2, 1024)


@pytest.mark.filterwarnings("ignore:The default weight initialization:FutureWarning")
def test_replace_head_inception_aux() -> None:
    model = build_model("inception_v3")
    assert replace_head(model, 3) == ["fc", "AuxLogits.fc"]
    assert model.AuxLogits.fc.out_features == 3


def test_replace_head_generic_fallback_and_error() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 5))
    assert find_head(model) == ["2"]
    assert replace_head(model, 2) == ["2"]
    assert model(torch.randn(1, 4)).shape == (1, 2)
    with pytest.raises(ModelSourceError, match="no classification head"):
        replace_head(nn.Sequential(nn.Conv2d(3, 3, 1)), 2)
    with pytest.raises(ModelSourceError, match="positive integer"):
        replace_head(model, 0)


# ---------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_checkpoint_round_trip_with_arch(tmp_path: Path, suffix: str) -> None:
    model = _randomized(build_model("resnet18", num_classes=10))
    path = save_checkpoint(model, tmp_path / f"r18{suffix}", arch="resnet18", metadata={"epoch": 3})
    assert path.is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    result = load_checkpoint(path)  # arch and head size come from the file
    assert isinstance(result, LoadResult)
    assert result.format == ("pt" if suffix == ".pt" else "safetensors")
    assert result.arch == "resnet18"
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert current_num_classes(result.model) == 10
    assert result.source == path
    assert result.metadata["arch"] == "resnet18"
    _assert_same_state(model, result.model)


def test_checkpoint_num_classes_mismatch_is_reported(tmp_path: Path) -> None:
    path = save_checkpoint(
        build_model("resnet18", num_classes=10), tmp_path / "r.safetensors", arch="resnet18"
    )
    with pytest.raises(ModelSourceError) as info:
        load_checkpoint(path, num_classes=5)
    message = str(info.value)
    assert "10-class" in message and "num_classes=5" in message and "replace_head" in message


def test_checkpoint_into_given_model_nested_and_prefixed(tmp_path: Path) -> None:
    source = _randomized(Tiny())
    state = source.state_dict()
    variants = {
        "raw": state,
        "nested_state_dict": {"state_dict": state, "epoch": 4},
        "nested_model": {"model": state},
        "nested_model_state_dict": {"model_state_dict": state, "optimizer": {"lr": 0.1}},
        "nested_net": {"net": state},
        "ddp": OrderedDict((f"module.{k}", v) for k, v in state.items()),
        "compiled": {"state_dict": {f"_orig_mod.{k}": v for k, v in state.items()}},
        "lightning": {
            "state_dict": {f"model.{k}": v for k, v in state.items()},
            "hyper_parameters": {"arch": "tiny"},
        },
    }
    for label, payload in variants.items():
        path = tmp_path / f"{label}.pth"
        torch.save(payload, path)
        target = Tiny()
        result = load_checkpoint(path, target, map_location="cpu")
        assert result.model is target, label
        assert result.missing_keys == [] and result.unexpected_keys == [], label
        _assert_same_state(source, target)
    assert load_checkpoint(tmp_path / "nested_state_dict.pth", Tiny()).metadata["epoch"] == 4
    assert load_checkpoint(tmp_path / "lightning.pth", Tiny()).metadata["arch"] == "tiny"


def test_checkpoint_missing_and_unexpected_keys_named(tmp_path: Path) -> None:
    state = Tiny().state_dict()
    del state["bn.running_var"]
    state["extra.weight"] = torch.zeros(2)
    path = tmp_path / "partial.pt"
    torch.save(state, path)
    result = load_checkpoint(path, Tiny())
    assert result.missing_keys == ["bn.running_var"]
    assert result.unexpected_keys == ["extra.weight"]
    with pytest.raises(ModelSourceError) as info:
        load_checkpoint(path, Tiny(), strict=True)
    message = str(info.value)
    assert "bn.running_var" in message and "extra.weight" in message and "strict=False" in message


def test_checkpoint_strict_message_is_truncated(tmp_path: Path) -> None:
    path = tmp_path / "many.pt"
    torch.save({f"junk{i}": torch.zeros(1) for i in range(30)}, path)
    with pytest.raises(ModelSourceError) as info:
        load_checkpoint(path, Tiny(), strict=True)
    message = str(info.value)
    assert "junk0" in message and "junk29" not in message and "more" in message


def test_checkpoint_shape_mismatch_names_parameter_and_shapes(tmp_path: Path) -> None:
    path = tmp_path / "other.safetensors"
    save_checkpoint(Tiny(num_classes=5), path)
    with pytest.raises(ModelSourceError) as info:
        load_checkpoint(path, Tiny(num_classes=3))
    message = str(info.value)
    assert str(path) in message
    assert "fc.weight" in message and "[5, 4]" in message and "[3, 4]" in message


def test_checkpoint_without_arch_asks_for_one(tmp_path: Path) -> None:
    path = tmp_path / "noarch.pt"
    torch.save(Tiny().state_dict(), path)
    with pytest.raises(ModelSourceError, match="arch="):
        load_checkpoint(path)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.pt", b""),
        ("garbage.pt", b"this is not a checkpoint at all"),
        ("garbage.safetensors", b"\x00\x01\x02 not safetensors"),
        ("weird.xyz", b"hello"),
    ],
)
def test_checkpoint_unreadable_files(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ModelSourceError) as info:
        load_checkpoint(path, Tiny())
    assert str(path) in str(info.value)


def test_checkpoint_truncated_file(tmp_path: Path) -> None:
    good = tmp_path / "good.pt"
    torch.save(Tiny().state_dict(), good)
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ModelSourceError) as info:
        load_checkpoint(bad, Tiny())
    assert str(bad) in str(info.value) and "corrupt" in str(info.value)


def test_checkpoint_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt", Tiny())


def test_torch_file_named_safetensors_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "wrong.safetensors"
    torch.save(Tiny().state_dict(), path)
    with pytest.raises(ModelSourceError, match="rename it to .pt"):
        load_checkpoint(path, Tiny())


class _Evil:
    """Pickles to a call of ``open(marker, "w")``: loading it would create the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def test_malicious_pickle_refused_without_side_effect(tmp_path: Path) -> None:
    marker = tmp_path / "pwned.txt"
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": Tiny().state_dict(), "payload": _Evil(marker)}, path)
    assert not marker.exists()
    with pytest.raises(ModelSourceError) as info:
        load_checkpoint(path, Tiny())
    assert "trust_pickle" in str(info.value)
    assert not marker.exists()


def test_full_pickled_module_refused_then_trusted(tmp_path: Path) -> None:
    source = _randomized(Tiny())
    path = tmp_path / "whole.pt"
    torch.save(source, path)
    with pytest.raises(ModelSourceError) as info:
        load_checkpoint(path, Tiny())
    message = str(info.value)
    assert "trust_pickle=True" in message and "--trust-pickle" in message
    assert "arbitrary code" in message
    target = Tiny()
    result = load_checkpoint(path, target, trust_pickle=True)
    assert result.model is target
    _assert_same_state(source, target)
    # without a model, the trusted module itself is returned
    whole = load_checkpoint(path, trust_pickle=True).model
    assert isinstance(whole, Tiny)
    _assert_same_state(source, whole)


def test_save_checkpoint_rejects_unknown_suffix(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="safetensors"):
        save_checkpoint(Tiny(), tmp_path / "model.onnx")


def test_save_safetensors_with_shared_tensors(tmp_path: Path) -> None:
    model = Tied()
    path = save_checkpoint(model, tmp_path / "tied.safetensors")
    target = Tied()
    result = load_checkpoint(path, target)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert torch.equal(target.emb.weight, model.emb.weight)


# ---------------------------------------------------------------------------- ModelSpec


def test_model_spec_round_trip_and_build(tmp_path: Path) -> None:
    spec = ModelSpec(source="torchvision", name="resnet18", weights=None, num_classes=4)
    data = spec.to_dict()
    assert data == {
        "source": "torchvision",
        "name": "resnet18",
        "weights": None,
        "checkpoint": None,
        "num_classes": 4,
    }
    assert ModelSpec.from_dict({**data, "fingerprint": "abc"}) == spec
    model = spec.build()
    assert current_num_classes(model) == 4

    path = save_checkpoint(_randomized(model), tmp_path / "m.safetensors", arch="resnet18")
    from_ckpt = ModelSpec(source="checkpoint", checkpoint=str(path)).build()
    _assert_same_state(model, from_ckpt)
    # checkpoint on top of a registry model, then a new head
    on_top = ModelSpec(name="resnet18", checkpoint=str(path), num_classes=2).build()
    assert current_num_classes(on_top) == 2
    assert torch.equal(on_top.conv1.weight, model.conv1.weight)


def test_model_spec_validation() -> None:
    with pytest.raises(ModelSourceError, match="source"):
        ModelSpec(source="hub", name="x")  # type: ignore[arg-type]
    with pytest.raises(ModelSourceError, match="checkpoint file"):
        ModelSpec(source="checkpoint")
    with pytest.raises(ModelSourceError, match="name"):
        ModelSpec.from_dict({"source": "torchvision", "name": 3})
    with pytest.raises(ModelSourceError, match="num_classes"):
        ModelSpec.from_dict({"name": "resnet18", "num_classes": "ten"})

"""Pickles never run code unless --trust-pickle: checkpoints, the torch hub weights cache, odd names."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from tests.hostile.makers import Tiny, write_payload_pickle, write_raw_payload_pickle
from workbench.cli import main
from workbench.core.models.weights_cache import (
    WeightsCacheError,
    check_hash_prefix,
    load_cached_state_dict,
)
from workbench.core.models.zoo import (
    ModelSourceError,
    build_model,
    load_checkpoint,
    save_checkpoint,
)


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_pickle_in_hub_cache_is_refused_and_never_runs(torch_home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    cached = torch_home / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    write_payload_pickle(cached, marker)
    with pytest.raises(ModelSourceError, match="not the published file"):
        build_model("resnet18", "IMAGENET1K_V1", allow_download=False)
    assert not marker.exists()


def test_pickle_in_hub_cache_cli_one_line(torch_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    write_payload_pickle(torch_home / "hub" / "checkpoints" / "resnet18-f37072fd.pth", marker)
    rc = main(["inspect", "resnet18", "--weights", "IMAGENET1K_V1", "--depth", "0"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "resnet18-f37072fd.pth" in line and not marker.exists()


@pytest.mark.parametrize("writer", [write_payload_pickle, write_raw_payload_pickle])
def test_cache_loader_refuses_code_even_with_a_matching_hash(tmp_path: Path, writer) -> None:
    marker = tmp_path / "ran"
    raw = writer(tmp_path / "w.pth", marker)
    prefix = hashlib.sha256(raw.read_bytes()).hexdigest()[:8]
    named = raw.rename(tmp_path / f"weights-{prefix}.pth")
    with pytest.raises(WeightsCacheError) as info:
        load_cached_state_dict(named)
    assert not marker.exists()
    assert "trust" not in str(info.value).lower()  # never invites loading it anyway


def test_cache_loader_reads_a_good_file_and_checks_its_hash(tmp_path: Path) -> None:
    state = Tiny().state_dict()
    tmp = tmp_path / "w.pth"
    torch.save(state, tmp)
    prefix = hashlib.sha256(tmp.read_bytes()).hexdigest()[:8]
    good = tmp.rename(tmp_path / f"tiny-{prefix}.pth")
    loaded = load_cached_state_dict(good)
    assert set(loaded) == set(state)
    bad = tmp_path / "tiny-00000000.pth"
    bad.write_bytes(good.read_bytes())
    with pytest.raises(WeightsCacheError, match="not the published file"):
        check_hash_prefix(bad)


def test_offline_message_does_not_invite_placing_a_file(torch_home: Path) -> None:
    with pytest.raises(ModelSourceError) as info:
        build_model("resnet18", "IMAGENET1K_V1", allow_download=False)
    assert "place" not in str(info.value)


def test_checkpoint_pickle_refused_without_trust(tmp_path: Path) -> None:  # promise (held before)
    marker = tmp_path / "ran"
    path = write_payload_pickle(tmp_path / "evil.pt", marker)
    with pytest.raises(ModelSourceError, match="pickled Python objects"):
        load_checkpoint(path, Tiny())
    assert not marker.exists()


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".bin", ".ckpt"])
def test_safetensors_named_like_torch_file_loads(tmp_path: Path, suffix: str) -> None:
    src = save_checkpoint(Tiny(), tmp_path / "w.safetensors")
    renamed = src.rename(tmp_path / f"w{suffix}")
    result = load_checkpoint(renamed, Tiny())
    assert result.format == "safetensors" and not result.missing_keys and not result.unexpected_keys


def test_torch_file_named_safetensors_says_so(tmp_path: Path) -> None:  # promise (held before)
    path = tmp_path / "w.safetensors"
    torch.save(Tiny().state_dict(), path)
    with pytest.raises(ModelSourceError, match="rename it to .pt"):
        load_checkpoint(path, Tiny())

"""``workbench models``: a closed pipe ends quietly, an empty Hugging Face cache is said as such."""

from __future__ import annotations

import os
import sys

import pytest

from workbench.cli import main


def test_a_reader_that_closes_the_pipe_is_not_an_error(monkeypatch, capsys):
    pytest.importorskip("timm")
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` has exited: every write now fails with EPIPE
    stream = os.fdopen(write_end, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", stream)
    try:
        assert main(["models", "--source", "timm", "vit_*"]) == 0
    finally:
        stream.close()
    assert "error" not in capsys.readouterr().err


def test_an_empty_hf_cache_says_so_and_exits_0(monkeypatch, tmp_path, capsys):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert main(["models", "--source", "hf"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"the Hugging Face cache ({tmp_path / 'hub'}) holds no model yet"), err
    assert main(["models", "--source", "timm", "no-such-model-*"]) == 1  # a pattern that matches nothing still is 1

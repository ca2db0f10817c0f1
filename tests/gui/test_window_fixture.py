"""The ``window`` fixture's start-up model (a copy of one built once per test process) is what the window's
own start-up load gives: the same plan block, label, note, tree and parameters, in a model of its own."""

from __future__ import annotations

from typing import Any

import torch

from workbench.gui.main_window import MainWindow
from workbench.gui.model_loading import default_request, load_model


def test_the_start_up_copy_is_the_start_up_load(window: MainWindow, _start_up_model: tuple[Any, Any]) -> None:
    loaded = window.controller.loaded
    real = load_model(default_request())
    assert loaded is not None
    assert (loaded.spec, loaded.label, loaded.note, loaded.messages, loaded.meta) == (
        real.spec, real.label, real.note, real.messages, real.meta)
    assert loaded.tree.fingerprint == real.tree.fingerprint and loaded.own_bytes == real.own_bytes
    assert loaded.param_shapes == real.param_shapes
    shared = _start_up_model[1].model
    assert loaded.model is not shared
    mine, theirs = dict(loaded.model.named_parameters()), dict(shared.named_parameters())
    assert all(mine[n].data_ptr() != theirs[n].data_ptr() for n in mine)  # no tensor shared with the next window
    with torch.no_grad():
        mine["fc.bias"].add_(1.0)
    assert not torch.equal(mine["fc.bias"], theirs["fc.bias"])

"""A profile's pass leaves nothing alive: autograd's record of the pass goes with it, and so does
what the pass's checkpoint holds (in the app, the window whose estimate profiled the model)."""

from __future__ import annotations

import gc
import weakref

import torch
from torch import nn

from workbench.core.advisor.profile import profile_model


class _Checkpoint:
    """A checkpoint that counts its calls (and can be watched with a weak reference)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_the_pass_and_its_checkpoint_are_freed() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Sigmoid())  # ReLU, Sigmoid save outputs
    tick = _Checkpoint()
    gone = weakref.ref(tick)
    profile = profile_model(model, (2, 4), checkpoint=tick)
    assert tick.calls > 0 and profile.saved
    del tick
    gc.collect()
    assert gone() is None, "the profile's autograd record (a cycle through C++) still holds the checkpoint"


def test_a_backward_through_the_saved_tensors_still_works() -> None:
    """The saved tensors autograd gets back are the ones the pass saved: a backward (a model that takes
    gradients in its own forward) gets the gradients it gets without the profile."""
    from workbench.core.advisor import profile

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Sigmoid())
    x = torch.randn(3, 4)
    with torch.autograd.graph.saved_tensors_hooks(profile._storage_view, profile._from_storage_view):
        model(x).sum().backward()
    hooked = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    plain = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(hooked) == len(plain) == 4
    assert all(torch.equal(a, b) for a, b in zip(hooked, plain))

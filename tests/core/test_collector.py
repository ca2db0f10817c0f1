"""The cyclic garbage collector is held off around passes that make millions of objects."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest
from torch import nn

from workbench.core.advisor.activations import profile_activations
from workbench.core.collector import collector_paused
from workbench.core.models.meta_copy import meta_copy


@pytest.fixture(autouse=True)
def _collector_back_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_nested_and_concurrent_blocks_keep_it_off_until_the_last_ends() -> None:
    outer_in, inner_out, outer_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def other_thread() -> None:
        with collector_paused():
            outer_in.set()
            inner_out.wait()
            seen.append(gc.isenabled())  # the main thread's block has ended, this one has not
        outer_out.set()

    t = threading.Thread(target=other_thread)
    t.start()
    outer_in.wait()
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    inner_out.set()
    outer_out.wait()
    t.join()
    assert seen == [False] and gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_it_comes_back_on_after_an_exception() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the pass failed")
    assert gc.isenabled()


def test_the_meta_copy_and_the_profile_run_without_it() -> None:
    during: list[bool] = []

    def checkpoint() -> None:
        during.append(gc.isenabled())

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    meta = meta_copy(model, checkpoint)
    copied = len(during)
    profile_activations(meta, 2, 8, checkpoint=checkpoint, in_place=True)
    assert copied > 0 and len(during) > copied
    assert not any(during) and gc.isenabled()

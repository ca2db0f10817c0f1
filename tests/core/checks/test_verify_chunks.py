"""Tensor digests are read in chunks on the tensor's own device, never as one full-size copy."""

from __future__ import annotations

import hashlib

import pytest
import torch

from workbench.core.checks.verify import host_chunks, tensor_digest
from workbench.core.freezing import snapshot as verify

CHUNK = 4096


def _one_shot(t: torch.Tensor) -> str:
    """The digest as a full host copy gives it (what snapshots have always stored)."""
    c = t.detach().cpu().contiguous()
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{c.dtype}|{tuple(c.shape)}|".encode())
    if c.numel():
        h.update(c.reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


@pytest.mark.parametrize("make", [
    lambda: torch.randn(257, 129),                      # contiguous, not a multiple of the chunk
    lambda: torch.randn(129, 257).t(),                  # transposed: rows of dim 0 are copied a few at a time
    lambda: torch.randn(3, 5000)[:, ::2],               # a row larger than a chunk: split in turn
    lambda: torch.randn(40, 60, 7).permute(2, 0, 1),
    lambda: torch.randint(0, 2, (999,), dtype=torch.bool),
    lambda: torch.randn(300, 300).to(torch.bfloat16),
    lambda: torch.tensor(3.5),
    lambda: torch.zeros(0, 4),
])
def test_chunked_digest_equals_the_one_shot_digest(make, monkeypatch):
    monkeypatch.setattr(verify, "DIGEST_CHUNK_BYTES", CHUNK)
    t = make()
    assert tensor_digest(t) == _one_shot(t)


def test_no_full_size_copy_of_a_large_tensor(monkeypatch):
    monkeypatch.setattr(verify, "DIGEST_CHUNK_BYTES", CHUNK)
    big = torch.randn(512, 1024).t()  # 2 MiB, not contiguous: the old digest copied all of it
    copies: list[int] = []
    real_contiguous, real_to = torch.Tensor.contiguous, torch.Tensor.to

    def contiguous(self: torch.Tensor, *a, **k):
        out = real_contiguous(self, *a, **k)
        if out.data_ptr() != self.data_ptr():
            copies.append(out.numel() * out.element_size())
        return out

    def to(self: torch.Tensor, *a, **k):
        out = real_to(self, *a, **k)
        if out.data_ptr() != self.data_ptr():
            copies.append(out.numel() * out.element_size())
        return out

    monkeypatch.setattr(torch.Tensor, "contiguous", contiguous)
    monkeypatch.setattr(torch.Tensor, "to", to)
    tensor_digest(big)
    total = big.numel() * big.element_size()
    assert copies and max(copies) <= CHUNK and sum(copies) == total
    flat = real_contiguous(big)
    copies.clear()
    chunks = list(host_chunks(flat, CHUNK))
    assert not copies  # a contiguous CPU tensor is hashed from views of its own memory
    assert len(chunks) == total // CHUNK and all(c.numel() <= CHUNK and c.device.type == "cpu" for c in chunks)


def test_a_change_in_any_chunk_changes_the_digest(monkeypatch):
    monkeypatch.setattr(verify, "DIGEST_CHUNK_BYTES", CHUNK)
    t = torch.randn(64, 64)  # 16 KiB: four chunks
    base = tensor_digest(t)
    for flat_index in (0, 1023, 1024, 2047, 3000, 4095):  # first and last element of chunks
        u = t.clone()
        u.view(-1)[flat_index] = torch.nextafter(u.view(-1)[flat_index], torch.tensor(1e9))
        assert tensor_digest(u) != base, flat_index
        assert tensor_digest(u.t().contiguous().t()) == tensor_digest(u)  # layout does not matter


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_digest_equals_cpu_digest_without_a_full_host_copy(monkeypatch):
    monkeypatch.setattr(verify, "DIGEST_CHUNK_BYTES", 1 << 20)
    t = torch.randn(4096, 1024, device="cuda")  # 16 MiB
    moved: list[int] = []
    real_to = torch.Tensor.to

    def to(self: torch.Tensor, *a, **k):
        out = real_to(self, *a, **k)
        if out.device.type == "cpu" and self.device.type == "cuda":
            moved.append(out.numel() * out.element_size())
        return out

    monkeypatch.setattr(torch.Tensor, "to", to)
    got = tensor_digest(t)
    monkeypatch.setattr(torch.Tensor, "to", real_to)
    assert got == _one_shot(t) and max(moved) <= 1 << 20 and sum(moved) == t.numel() * 4
    assert tensor_digest(t.t()) == _one_shot(t.t())

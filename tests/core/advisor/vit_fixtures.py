"""A tiny Hugging Face ViT folder whose own configuration sets the image side (no weights, no downloads)."""

from __future__ import annotations

from pathlib import Path

from tests.core.models.hf_fixtures import save_folder


def vit_folder(folder: Path, side: int) -> Path:
    """Save a config-only ViTForImageClassification whose position embeddings fit ``side``-px images (3 classes).

    Args:
        folder: where to write ``config.json``.
        side: its ``config.image_size`` (a multiple of 16, the patch size).

    Returns:
        The folder.
    """
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=side, patch_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=16, num_labels=3, architectures=["ViTForImageClassification"])
    return save_folder(ViTForImageClassification(config), folder, weights="none")

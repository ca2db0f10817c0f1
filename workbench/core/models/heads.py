"""Classification heads: finding a model's head, its number of classes, and replacing it for a new task."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.core.models.source_errors import ModelSourceError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch import nn

__all__ = [
    "current_num_classes",
    "find_head",
    "replace_head",
]


def _get(model: nn.Module, path: str) -> nn.Module | None:
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None


def _last_linear_in(module: nn.Module, prefix: str) -> str | None:
    from torch import nn

    found = None
    for sub_name, sub in module.named_modules(prefix=prefix):
        if isinstance(sub, nn.Linear):
            found = sub_name
    return found


def _head_out(module: nn.Module) -> int:
    from torch import nn

    if isinstance(module, nn.Linear):
        return module.out_features
    if isinstance(module, nn.Conv2d):
        return module.out_channels
    raise TypeError(type(module).__name__)


def find_head(model: nn.Module) -> list[str]:
    """Find the classification head(s) of a model by dotted path.

    The main head comes first; auxiliary heads (inception ``AuxLogits.fc``, googlenet
    ``aux1.fc2``/``aux2.fc2``) follow.

    Args:
        model: A torchvision-style classifier.

    Returns:
        Dotted module paths; empty if no head was recognised.
    """
    import torchvision
    from torch import nn

    tv = torchvision.models
    if isinstance(model, tv.SqueezeNet):
        return ["classifier.1"] if isinstance(_get(model, "classifier.1"), nn.Conv2d) else []
    paths: list[str] = []
    main: str | None = None
    if isinstance(model, tv.VisionTransformer) and isinstance(_get(model, "heads.head"), nn.Linear):
        main = "heads.head"
    else:
        for attr in ("fc", "head", "classifier", "heads"):
            sub = _get(model, attr)
            if isinstance(sub, nn.Linear):
                main = attr
                break
            if isinstance(sub, nn.Sequential):
                main = _last_linear_in(sub, attr)
                if main is not None:
                    break
    if main is None:
        # Generic fallback: the last Linear in module order, which for a classifier
        # is the one producing the class logits.
        main = _last_linear_in(model, "")
    if main is None:
        return []
    paths.append(main)
    for aux in ("AuxLogits.fc", "aux1.fc2", "aux2.fc2"):
        if isinstance(_get(model, aux), nn.Linear):
            paths.append(aux)
    return paths


def current_num_classes(model: nn.Module) -> int | None:
    """Number of outputs of the model's classification head, or ``None`` if none found.

    Args:
        model: A classifier.

    Returns:
        ``out_features`` (or ``out_channels`` for squeezenet's conv head).
    """
    heads = find_head(model)
    return _head_out(model.get_submodule(heads[0])) if heads else None


def _new_head(old: nn.Module, num_classes: int) -> nn.Module:
    from torch import nn

    if isinstance(old, nn.Linear):
        return nn.Linear(
            old.in_features,
            num_classes,
            bias=old.bias is not None,
            device=old.weight.device,
            dtype=old.weight.dtype,
        )
    assert isinstance(old, nn.Conv2d)
    padding = old.padding if isinstance(old.padding, str) else (old.padding[0], old.padding[1])
    return nn.Conv2d(
        old.in_channels,
        num_classes,
        kernel_size=(old.kernel_size[0], old.kernel_size[1]),
        stride=(old.stride[0], old.stride[1]),
        padding=padding,
        bias=old.bias is not None,
        device=old.weight.device,
        dtype=old.weight.dtype,
    )


def _set_submodule(model: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, leaf = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, leaf, module)


def replace_head(model: nn.Module, num_classes: int) -> list[str]:
    """Replace the classification head(s) with fresh ones for ``num_classes`` classes.

    Handles torchvision families: ``fc`` (resnet, resnext, regnet, shufflenet, googlenet,
    inception incl. ``AuxLogits.fc``), the last Linear of a ``classifier`` Sequential (vgg,
    alexnet, mobilenet, efficientnet, mnasnet, convnext, maxvit), squeezenet's
    ``classifier.1`` conv, vit ``heads.head``, swin ``head``, densenet ``classifier``; else
    the last ``nn.Linear`` of the model. New modules are created on the old head's device
    and dtype and are trainable.

    Args:
        model: The model, modified in place.
        num_classes: New number of classes.

    Returns:
        Dotted paths of the new modules; empty if the head already had ``num_classes``
        outputs (nothing changed).

    Raises:
        ModelSourceError: ``num_classes`` invalid, or no head could be found.
    """
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ModelSourceError(f"num_classes must be a positive integer, got {num_classes!r}")
    heads = find_head(model)
    if not heads:
        raise ModelSourceError(
            f"no classification head (a final nn.Linear, or squeezenet's conv) found in "
            f"{type(model).__name__}; replace the head by hand before training"
        )
    if _head_out(model.get_submodule(heads[0])) == num_classes:
        return []
    replaced: list[str] = []
    for path in heads:
        old = model.get_submodule(path)
        _set_submodule(model, path, _new_head(old, num_classes))
        replaced.append(path)
    if isinstance(getattr(model, "num_classes", None), int):
        # squeezenet uses it in forward; vit keeps it too
        setattr(model, "num_classes", num_classes)  # noqa: B010
    for owner in (model, getattr(model, "config", None)):  # transformers: its loss reads num_labels
        if isinstance(getattr(owner, "num_labels", None), int):
            setattr(owner, "num_labels", num_classes)  # noqa: B010
    return replaced

"""Render the application icon's PNG sizes (and the Windows/macOS icon files) from its SVG.

Usage (from the repository root)::

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/render_icons.py

reads ``resources/icons/hicolor/scalable/apps/<APP_ID>.svg`` and writes

- ``resources/icons/hicolor/<N>x<N>/apps/<APP_ID>.png`` for every size in
  :data:`workbench.resources.ICON_SIZES` (package data: the window, the ``.desktop`` entry);
- ``packaging/icons/freeze-workbench.ico`` (Windows, 16–256 px) and
  ``packaging/icons/freeze-workbench.icns`` (macOS, 16–512 px) for the PyInstaller bundle.

The PNGs are rendered by Qt's ``QSvgRenderer`` (the renderer the app itself would use), the
``.ico``/``.icns`` containers are assembled by Pillow (a torchvision dependency) from those
exact PNGs. Run it after every change to the SVG and commit the results; a test re-renders
the icon and fails when the committed PNGs are stale.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from workbench.core.atomic import atomic_write  # noqa: E402
from workbench.resources import APP_ID, ICON_SIZES  # noqa: E402

__all__ = ["render_png", "render_all", "main"]

ICONS_DIR = ROOT / "resources" / "icons" / "hicolor"
BUNDLE_ICONS_DIR = ROOT / "packaging" / "icons"
#: Sizes the Windows ``.ico`` holds (256 is the largest the format shows).
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
#: Sizes the macOS ``.icns`` holds (the sizes the format has slots for).
ICNS_SIZES = (16, 32, 64, 128, 256, 512)


def render_png(svg: Path, size: int) -> bytes:
    """Render ``svg`` to a square PNG with a transparent background.

    Args:
        svg: the SVG file.
        size: edge length in pixels.

    Returns:
        The PNG file's bytes.

    Raises:
        ValueError: the SVG cannot be parsed (fix the file; Qt supports SVG Tiny 1.2).
    """
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    if QGuiApplication.instance() is None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        render_png._app = QGuiApplication([sys.argv[0]])  # type: ignore[attr-defined]  # keep it alive
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg}: not a valid SVG for Qt's renderer; keep to SVG Tiny 1.2 features")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buf, "PNG"):
        raise ValueError(f"Qt could not encode the {size} px icon as PNG; check the Qt image plugins")
    buf.close()
    return bytes(data.data())


def _container(pngs: dict[int, bytes], sizes: Sequence[int], fmt: str) -> bytes:
    """An ``.ico``/``.icns`` holding the given PNG sizes (Pillow)."""
    from PIL import Image

    images = [Image.open(io.BytesIO(pngs[s])).convert("RGBA") for s in sizes]
    out = io.BytesIO()
    largest = images[-1]
    if fmt == "ICO":
        largest.save(out, format="ICO", sizes=[(s, s) for s in sizes], append_images=images[:-1])
    else:
        largest.save(out, format="ICNS", append_images=images[:-1])
    return out.getvalue()


def render_all(svg: Path | None = None, icons_dir: Path = ICONS_DIR, bundle_dir: Path = BUNDLE_ICONS_DIR) -> list[Path]:
    """Write every PNG size and the bundle icon files.

    Args:
        svg: the source (default: the packaged scalable icon).
        icons_dir: the ``hicolor`` folder of the package resources.
        bundle_dir: the folder for ``.ico``/``.icns``.

    Returns:
        The written files.

    Raises:
        ValueError: the SVG cannot be rendered.
    """
    svg = svg or icons_dir / "scalable" / "apps" / f"{APP_ID}.svg"
    written: list[Path] = []
    pngs: dict[int, bytes] = {}
    for size in ICON_SIZES:
        pngs[size] = render_png(svg, size)
        path = icons_dir / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, pngs[size])
        written.append(path)
    bundle_dir.mkdir(parents=True, exist_ok=True)
    for name, sizes, fmt in (("freeze-workbench.ico", ICO_SIZES, "ICO"), ("freeze-workbench.icns", ICNS_SIZES, "ICNS")):
        missing = [s for s in sizes if s not in pngs]
        pngs.update({s: render_png(svg, s) for s in missing})
        path = bundle_dir / name
        atomic_write(path, _container(pngs, sizes, fmt))
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python packaging/render_icons.py [SVG]``.

    Args:
        argv: optional path of another SVG to render (default: the packaged icon).

    Returns:
        0 on success, 2 when the SVG cannot be rendered.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        for path in render_all(Path(args[0]) if args else None):
            print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    except ValueError as e:
        print(f"render_icons: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

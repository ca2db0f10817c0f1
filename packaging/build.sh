#!/usr/bin/env bash
# Build the Freeze Workbench one-folder desktop bundle with PyInstaller (Linux; macOS alike).
#
#   packaging/build.sh [--python PY | --venv DIR [--cpu-torch]] [--dist DIR] [--work DIR]
#
#   --python PY   build with this interpreter as it is; it needs freeze-workbench (editable is
#                 fine), torch, torchvision, PySide6-Essentials, pyqtgraph and pyinstaller.
#                 Default: .venv/bin/python when it exists, else python3.
#   --venv DIR    first create a fresh build venv in DIR and install the app and pyinstaller
#                 into it (needs network). With --cpu-torch, torch and torchvision come from
#                 the PyTorch CPU index: a bundle of about 1 GB instead of about 6 GB with
#                 the CUDA libraries.
#   --dist DIR    where the bundle goes (default: dist/) — dist/freeze-workbench/
#   --work DIR    PyInstaller's work folder (default: build/pyinstaller/)
#
# Then: packaging/smoke_test.sh dist/freeze-workbench
# Windows and macOS notes, bundle sizes: packaging/README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PY=""
VENV=""
CPU_TORCH=0
DIST="dist"
WORK="build/pyinstaller"
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

die() { echo "build.sh: error: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --python) [ $# -ge 2 ] || die "--python needs an interpreter path"; PY="$2"; shift 2 ;;
    --venv) [ $# -ge 2 ] || die "--venv needs a folder"; VENV="$2"; shift 2 ;;
    --cpu-torch) CPU_TORCH=1; shift ;;
    --dist) [ $# -ge 2 ] || die "--dist needs a folder"; DIST="$2"; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a folder"; WORK="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1; see packaging/build.sh --help" ;;
  esac
done
[ -n "$PY" ] && [ -n "$VENV" ] && die "give --python or --venv, not both"
[ "$CPU_TORCH" = 1 ] && [ -z "$VENV" ] && die "--cpu-torch installs torch into a new venv: add --venv DIR"

start=$SECONDS
if [ -n "$VENV" ]; then
  echo "== creating the build venv $VENV"
  python3 -m venv "$VENV"
  PY="$VENV/bin/python"
  "$PY" -m pip install -q --upgrade pip
  if [ "$CPU_TORCH" = 1 ]; then
    echo "== installing CPU-only torch and torchvision from $TORCH_CPU_INDEX"
    "$PY" -m pip install -q torch torchvision --index-url "$TORCH_CPU_INDEX"
  fi
  echo "== installing freeze-workbench and pyinstaller"
  "$PY" -m pip install -q . pyinstaller
fi
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi

"$PY" - <<'EOF' || die "the build Python lacks a package; install it (pip install pyinstaller) or use --venv DIR"
import importlib.util, sys
missing = [m for m in ("PyInstaller", "workbench", "torch", "torchvision", "PySide6.QtSvg", "pyqtgraph")
           if importlib.util.find_spec(m) is None]
if missing:
    print("build.sh: missing in", sys.executable, ":", ", ".join(missing), file=sys.stderr)
    sys.exit(1)
import torch
print(f"== building with {sys.executable}: torch {torch.__version__} "
      f"({'CUDA ' + torch.version.cuda if torch.version.cuda else 'CPU build'})")
EOF

"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$DIST" --workpath "$WORK" packaging/freeze-workbench.spec

BUNDLE="$DIST/freeze-workbench"
[ -x "$BUNDLE/workbench" ] || [ -f "$BUNDLE/workbench.exe" ] || die "PyInstaller did not produce $BUNDLE/workbench"
size=$(du -sh "$BUNDLE" | cut -f1)
echo "== bundle: $BUNDLE ($size, built in $((SECONDS - start)) s)"
echo "   smoke test: packaging/smoke_test.sh $BUNDLE"

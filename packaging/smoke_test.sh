#!/usr/bin/env bash
# Smoke test of a built bundle (or of any installed copy): start, load the default model,
# render the window offscreen, exit 0.
#
#   packaging/smoke_test.sh [BUNDLE_DIR]      (default: dist/freeze-workbench)
#
# BUNDLE_DIR holds the `workbench` (CLI) and `freeze-workbench` (desktop app) executables of
# packaging/build.sh. For an installed wheel, pass the venv's bin/ folder: there the desktop
# launcher is `workbench-gui`. Needs no display, no network and no Python: Qt renders on its
# offscreen platform. Writes only to a temporary folder. Exit 0 when every check passes.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="${1:-$ROOT/dist/freeze-workbench}"
[ -d "$B" ] || { echo "smoke_test: error: no bundle folder $B; build it with packaging/build.sh" >&2; exit 2; }
CLI="$B/workbench"
GUI="$B/freeze-workbench"
[ -x "$GUI" ] || GUI="$B/workbench-gui"
for exe in "$CLI" "$GUI"; do
  [ -x "$exe" ] || { echo "smoke_test: error: $exe is missing or not executable; rebuild the bundle" >&2; exit 2; }
done

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
export QT_QPA_PLATFORM=offscreen
export XDG_CONFIG_HOME="$TMP/config" XDG_DATA_HOME="$TMP/data" XDG_CACHE_HOME="$TMP/cache"
# keep the user's torch hub cache reachable: cached weights are used, never downloaded
export TORCH_HOME="${TORCH_HOME:-$HOME/.cache/torch}"

failed=0
last_ok=0
check() {  # check NAME COMMAND... : run, time, report; the output is in $TMP/out
  local name="$1"; shift
  local t0=$SECONDS
  if "$@" >"$TMP/out" 2>&1; then
    echo "ok    $name ($((SECONDS - t0)) s)"; last_ok=1
  else
    echo "FAIL  $name (exit $?, $((SECONDS - t0)) s):"; sed 's/^/      /' "$TMP/out" | tail -8
    failed=1; last_ok=0
  fi
}
contains() {  # contains REGEX WHAT : the last check's output matches (skipped when it failed)
  [ "$last_ok" = 1 ] || return 0
  grep -Eq "$1" "$TMP/out" || { echo "FAIL  expected /$1/ in the output of $2:"; sed 's/^/      /' "$TMP/out" | tail -8; failed=1; }; }

check "workbench --version" "$CLI" --version
contains '^freeze-workbench [0-9]+\.[0-9]+' "--version"
version_line="$(head -1 "$TMP/out")"

check "workbench --help" "$CLI" --help
for cmd in gui inspect train doctor export bench models; do
  contains "^ +$cmd +[^ ]" "--help (subcommand $cmd)"
done

check "workbench inspect resnet18 (torch, torchvision, model build)" "$CLI" inspect resnet18 --depth 0
contains 'Total params: +11,689,512' "inspect"

check "desktop entry from the bundle's resources" "$CLI" gui --install-desktop --prefix "$TMP/prefix"
contains 'installed 1[0-9] files' "--install-desktop"

PNG="$TMP/window.png"
check "desktop app: default model, window rendered offscreen" "$GUI" --screenshot "$PNG"
contains '^screenshot: .*model: resnet18' "--screenshot"
if [ -s "$PNG" ]; then
  magic="$(head -c 8 "$PNG" | od -An -tx1 | tr -d ' \n')"
  # IHDR width and height: bytes 16-23, big-endian
  dims="$(od -An -tu1 -j16 -N8 "$PNG" | awk '{printf "%d x %d", $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}')"
  if [ "$magic" = "89504e470d0a1a0a" ]; then
    echo "ok    window.png is a PNG of $dims pixels ($(wc -c <"$PNG") bytes)"
  else
    echo "FAIL  window.png is not a PNG"; failed=1
  fi
  [ -n "${SMOKE_KEEP_PNG:-}" ] && cp "$PNG" "$SMOKE_KEEP_PNG" && echo "      kept as $SMOKE_KEEP_PNG"
else
  echo "FAIL  no window.png written"; failed=1
fi

size="$(du -sh "$B" 2>/dev/null | cut -f1)"
if [ "$failed" = 0 ]; then
  echo "smoke test passed: $version_line, bundle $B ($size)"
else
  echo "smoke test FAILED: $B"
fi
exit "$failed"

#!/usr/bin/env bash
# Build dist/kpdiag.pyz: one file holding kpdiag and all of its dependencies, pure Python, that runs with any
# Python >= 3.10 (`python3 kpdiag.pyz node`, e.g. after `kubectl cp` into a python:3.12-slim debug pod).
#
# Dependencies are resolved for the oldest supported Python (3.10) so that the backports it needs are inside, with
# deploy/constraints.txt (a kubernetes client line without compiled-only dependencies); the
# few compiled accelerators some wheels carry (PyYAML's _yaml, charset-normalizer's mypyc modules) are left out —
# each of those packages falls back to its pure-Python code — so the file does not depend on one interpreter's ABI.
# The build fails if anything compiled would be left or if the result does not run.
#
#   bash deploy/build-pyz.sh [OUT]        (default dist/kpdiag.pyz; needs the package index or pip's configured wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-dist/kpdiag.pyz}
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/kpdiag-pyz.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
M=$(uname -m)

# from a copy of what the wheel is made of: no build/ directory shared with another build running at the same time
mkdir -p "$WORK/src" && cp -a pyproject.toml README.md LICENSE kpdiag checks "$WORK/src/"
find "$WORK/src" -name __pycache__ -type d -prune -exec rm -rf {} +
"$PY" -m pip wheel -q --no-deps -w "$WORK/wheel" "$WORK/src" >/dev/null
WHEEL=$(ls "$WORK"/wheel/kpdiag-*.whl)
"$PY" -m pip install -q --no-compile --disable-pip-version-check --target "$WORK/app" --only-binary=:all: \
  --python-version 3.10 --implementation cp --abi cp310 --abi abi3 --abi none \
  --platform "manylinux2014_$M" --platform "manylinux_2_17_$M" --platform "manylinux_2_28_$M" --platform "linux_$M" \
  -c deploy/constraints.txt "$WHEEL" >/dev/null 2>"$WORK/pip.err" || { cat "$WORK/pip.err" >&2; exit 1; }

# pure Python only: compiled modules are ABI-bound (each package here has a pure-Python fallback for them)
find "$WORK/app" \( -name '*.so' -o -name '*.pyd' \) -print > "$WORK/compiled.txt"
while read -r f; do rm -f "$f"; done < "$WORK/compiled.txt"
rm -rf "$WORK/app/bin"
find "$WORK/app" -name __pycache__ -type d -prune -exec rm -rf {} +
if [ -s "$WORK/compiled.txt" ]; then
  echo "left out (compiled; pure-Python fallback used): $(sed "s|$WORK/app/||" "$WORK/compiled.txt" | xargs)"
fi

cat > "$WORK/app/__main__.py" <<'EOF'
import sys

if sys.version_info < (3, 10):
    sys.exit(f"kpdiag needs Python >= 3.10 (this is {sys.version.split()[0]})")
from kpdiag.cli import run

run()  # the same entry as the installed kpdiag: exit codes, Ctrl-C within 1 s
EOF
mkdir -p "$(dirname "$OUT")"
"$PY" -m zipapp "$WORK/app" -o "$OUT" -p '/usr/bin/env python3' -c
chmod 0755 "$OUT"   # runnable by anyone as ./kpdiag.pyz (or as kubectl-kpdiag, krew's plugin binary)
"$PY" "$OUT" --version >/dev/null
echo "$OUT: $(awk -v b="$(stat -c %s "$OUT")" 'BEGIN { printf "%.1f MB", b / 1e6 }'), $(find "$WORK/app" -maxdepth 1 -name '*.dist-info' | sed 's|.*/||; s|\.dist-info$||' | sort | xargs)"

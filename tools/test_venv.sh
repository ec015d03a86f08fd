#!/usr/bin/env bash
# Makes the test environment: a Python venv at BUILD/test-venv holding the
# PyPI packages of tests/requirements.txt (ONNX Runtime, an MLflow server:
# the real components the tests talk to). Rebuilt when the requirements
# change (their SHA-256 is kept in the venv's stamp file); otherwise it
# returns at once. Uses Debian's python3 (python3-venv, tools/deps.sh).
# Usage: tools/test_venv.sh BUILD
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
requirements="$here/tests/requirements.txt"
venv="$build/test-venv"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && exit 0

python=$(command -v /usr/bin/python3 || command -v python3)
echo "test-venv: installing tests/requirements.txt into $venv (PyPI)"
rm -rf "$venv"
"$python" -m venv "$venv" || {
  echo "test-venv: '$python -m venv $venv' failed (make deps installs python3-venv)" >&2
  exit 1
}
"$venv/bin/pip" install --disable-pip-version-check -q -r "$requirements" || {
  echo "test-venv: pip install -r tests/requirements.txt failed (PyPI unreachable?); the ONNX and MLflow tests need it" >&2
  rm -rf "$venv"
  exit 1
}
echo "$want" >"$stamp"

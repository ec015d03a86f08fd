#!/usr/bin/env bash
# Makes the test environment: a Python venv at BUILD/test-venv holding the
# PyPI packages of tests/requirements-mlflow.txt (the MLflow server and
# client: a fully pinned closure installed with --no-deps, so that mlflow's
# declared data-science stack stays out) and then tests/requirements.txt
# (ONNX Runtime; pip resolves it against what is already installed): the
# real components the tests talk to. Rebuilt when either file changes
# (their SHA-256 is kept in the venv's stamp file); otherwise it returns at
# once. Uses Debian's python3 (python3-venv, tools/deps.sh).
# Usage: tools/test_venv.sh BUILD
set -u
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
requirements="$here/tests/requirements.txt"
requirements_no_deps="$here/tests/requirements-mlflow.txt"
venv="$build/test-venv"
stamp="$venv/.requirements.sha256"
want=$(cat "$requirements_no_deps" "$requirements" | sha256sum | cut -d' ' -f1)
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && exit 0

python=$(command -v /usr/bin/python3 || command -v python3)
echo "test-venv: installing tests/requirements-mlflow.txt and tests/requirements.txt into $venv (PyPI)"
rm -rf "$venv"
"$python" -m venv "$venv" || {
  echo "test-venv: '$python -m venv $venv' failed (make deps installs python3-venv)" >&2
  exit 1
}
"$venv/bin/pip" install --disable-pip-version-check -q --no-deps -r "$requirements_no_deps" || {
  echo "test-venv: pip install --no-deps -r tests/requirements-mlflow.txt failed (PyPI unreachable?); the MLflow test needs it" >&2
  rm -rf "$venv"
  exit 1
}
"$venv/bin/pip" install --disable-pip-version-check -q -r "$requirements" || {
  echo "test-venv: pip install -r tests/requirements.txt failed (PyPI unreachable?); the ONNX and MLflow tests need it" >&2
  rm -rf "$venv"
  exit 1
}
echo "$want" >"$stamp"

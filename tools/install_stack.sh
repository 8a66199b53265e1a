#!/usr/bin/env bash
# Installs the pinned stack into a virtual environment, builds Horovod from source
# against it, and proves the build has TensorFlow and Gloo.
#
#   tools/install_stack.sh VENV_DIR
#
# Environment:
#   PYTHON                 interpreter that creates the venv (default: python3.11, else python3)
#   HVDKERAS_WHEEL_CACHE   where built Horovod wheels are kept (default: ~/.cache/hvdkeras/wheels).
#                          Each wheel lives in a folder named after everything it was built
#                          against (Horovod, TF, Python, controllers, devices), so a wheel built
#                          for another stack is never picked up (pip's own wheel cache is bypassed).
set -euo pipefail

VENV=${1:?usage: install_stack.sh VENV_DIR}
HERE=$(cd "$(dirname "$0")/.." && pwd)
CONSTRAINTS="$HERE/constraints.txt"
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}

pin() { sed -n "s/^$1==\([^ ]*\).*/\1/p" "$CONSTRAINTS"; }
HVD_VERSION=$(pin horovod)
TF_VERSION=$(pin tensorflow-cpu)

if [ ! -x "$VENV/bin/python" ]; then
  echo "[install] creating $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
# pip warns about every package missing from a local index folder this machine may list; drop that noise.
pip_run() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

echo "[install] pinned stack (constraints.txt)"
# The direct requirements, Horovod's own dependencies and the build/test tools;
# every version comes from the constraints.
pip_run install -q -c "$CONSTRAINTS" -r "$HERE/requirements.txt" \
  wheel setuptools "cmake<4" pytest cloudpickle psutil packaging

PYTAG=$("$PY" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
FLAGS="tf-gloo-cpu"
CACHE_ROOT=${HVDKERAS_WHEEL_CACHE:-$HOME/.cache/hvdkeras/wheels}
WHEEL_DIR="$CACHE_ROOT/horovod-$HVD_VERSION-tensorflow-cpu-$TF_VERSION-$PYTAG-$FLAGS"

installed_hvd=$("$PY" -c 'import importlib.metadata as m; print(m.version("horovod"))' 2>/dev/null || true)
if [ "$installed_hvd" != "$HVD_VERSION" ] || ! TF_CPP_MIN_LOG_LEVEL=2 "$PY" -c 'import horovod.tensorflow' 2>/dev/null; then
  if ! ls "$WHEEL_DIR"/horovod-*.whl >/dev/null 2>&1; then
    echo "[install] building Horovod $HVD_VERSION against TensorFlow $TF_VERSION (4-5 minutes on 2 cores) into $WHEEL_DIR"
    mkdir -p "$WHEEL_DIR.tmp"
    PATH="$VENV/bin:$PATH" \
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    MAKEFLAGS="-j$(nproc)" \
      pip_run wheel --no-build-isolation --no-cache-dir --no-deps \
        -w "$WHEEL_DIR.tmp" "horovod==$HVD_VERSION"
    rm -rf "$WHEEL_DIR" && mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
  else
    echo "[install] reusing Horovod wheel from $WHEEL_DIR"
  fi
  pip_run install -q --no-cache-dir --force-reinstall --no-deps "$WHEEL_DIR"/horovod-*.whl
fi

echo "[install] hvdkeras (editable)"
pip_run install -q --no-deps --no-build-isolation -e "$HERE"

echo "[install] checking the Horovod build"
TF_CPP_MIN_LOG_LEVEL=2 "$PY" -c 'import horovod.tensorflow as hvd, horovod.tensorflow.keras; import tensorflow as tf; print("[install] horovod", hvd.__version__ if hasattr(hvd, "__version__") else "", "tensorflow", tf.__version__)'
CHECK=$(TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/horovodrun" --check-build)
echo "$CHECK"
for need in "TensorFlow" "Gloo"; do
  if ! grep -q "\[X\] $need" <<<"$CHECK"; then
    echo "[install] FAILED: horovodrun --check-build does not list $need as available. Rebuild with: rm -rf '$WHEEL_DIR' && make install" >&2
    exit 1
  fi
done
echo "[install] done"

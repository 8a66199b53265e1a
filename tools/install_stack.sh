#!/usr/bin/env bash
# Installs one pinned stack into a virtual environment, builds Horovod from source
# against it, and proves the build has TensorFlow, Gloo and (when OpenMPI is present) MPI.
#
#   tools/install_stack.sh VENV_DIR [STACK]        STACK: keras2 (default) | keras3
#
# A stack is a folder stacks/<STACK>/ with constraints.txt (every version) and
# requirements.txt (the direct requirements). Each stack gets its own VENV_DIR, so
# switching stacks never rebuilds or mixes wheels.
#
# Environment:
#   PYTHON                 interpreter that creates the venv (default: python3.11, else python3)
#   HVDKERAS_WHEEL_CACHE   where built Horovod wheels are kept (default: ~/.cache/hvdkeras/wheels).
#                          Each wheel lives in a folder named after everything it was built
#                          against (Horovod, TF, Python, controllers, devices), so a wheel built
#                          for another stack is never picked up (pip's own wheel cache is bypassed).
#   HVDKERAS_WITHOUT_MPI=1 build Gloo only even where OpenMPI is installed.
set -euo pipefail

VENV=${1:?usage: install_stack.sh VENV_DIR [keras2|keras3]}
STACK=${2:-keras2}
HERE=$(cd "$(dirname "$0")/.." && pwd)
STACK_DIR="$HERE/stacks/$STACK"
if [ ! -f "$STACK_DIR/constraints.txt" ]; then
  echo "[install] FAILED: unknown stack '$STACK'; choose one of: $(ls "$HERE/stacks" | tr '\n' ' ')" >&2
  exit 2
fi
CONSTRAINTS="$STACK_DIR/constraints.txt"
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}

pin() { sed -n "s/^$1==\([^ ]*\).*/\1/p" "$CONSTRAINTS"; }
HVD_VERSION=$(pin horovod)
TF_VERSION=$(pin tensorflow-cpu)

# Controllers: Gloo always; MPI too when OpenMPI's compiler wrapper and launcher are here.
if [ "${HVDKERAS_WITHOUT_MPI:-0}" != 1 ] && command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
  MPI_ENV=(HOROVOD_WITH_MPI=1); FLAGS="tf-gloo-mpi-cpu"; NEED=(TensorFlow Gloo MPI)
else
  MPI_ENV=(HOROVOD_WITHOUT_MPI=1); FLAGS="tf-gloo-cpu"; NEED=(TensorFlow Gloo)
  echo "[install] OpenMPI not found (or HVDKERAS_WITHOUT_MPI=1): building Horovod with Gloo only; 'make install-mpi' adds MPI"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "[install] creating $VENV with $PYTHON (stack $STACK)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
# pip warns about every package missing from a local index folder this machine may list; drop that noise.
pip_run() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

echo "[install] pinned stack $STACK (stacks/$STACK/constraints.txt)"
# The direct requirements, Horovod's own dependencies and the build/test tools;
# every version comes from the constraints.
pip_run install -q -c "$CONSTRAINTS" -r "$STACK_DIR/requirements.txt" \
  wheel setuptools "cmake<4" pytest cloudpickle psutil packaging

PYTAG=$("$PY" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
CACHE_ROOT=${HVDKERAS_WHEEL_CACHE:-$HOME/.cache/hvdkeras/wheels}
BUILD_ID="horovod-$HVD_VERSION-tensorflow-cpu-$TF_VERSION-$PYTAG-$FLAGS"
WHEEL_DIR="$CACHE_ROOT/$BUILD_ID"
BUILD_MARK="$VENV/.horovod-build"   # which wheel folder the installed Horovod came from

if [ "$(cat "$BUILD_MARK" 2>/dev/null)" != "$BUILD_ID" ] || ! TF_CPP_MIN_LOG_LEVEL=2 "$PY" -c 'import horovod.tensorflow' 2>/dev/null; then
  if ! ls "$WHEEL_DIR"/horovod-*.whl >/dev/null 2>&1; then
    echo "[install] building Horovod $HVD_VERSION against TensorFlow $TF_VERSION ($FLAGS; 3-5 minutes on 2 cores) into $WHEEL_DIR"
    rm -rf "$WHEEL_DIR.tmp" && mkdir -p "$WHEEL_DIR.tmp"
    env PATH="$VENV/bin:$PATH" \
      HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 "${MPI_ENV[@]}" \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
      MAKEFLAGS="-j$(nproc)" \
      "${PIP[@]}" wheel --no-build-isolation --no-cache-dir --no-deps \
        -w "$WHEEL_DIR.tmp" "horovod==$HVD_VERSION" \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    rm -rf "$WHEEL_DIR" && mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
  else
    echo "[install] reusing Horovod wheel from $WHEEL_DIR"
  fi
  pip_run install -q --no-cache-dir --force-reinstall --no-deps "$WHEEL_DIR"/horovod-*.whl
  echo "$BUILD_ID" > "$BUILD_MARK"
fi

echo "[install] hvdkeras (editable)"
HVDKERAS_STACK=$STACK pip_run install -q --no-deps --no-build-isolation -e "$HERE"
echo "$STACK" > "$VENV/.hvdkeras-stack"

echo "[install] checking the Horovod build"
TF_CPP_MIN_LOG_LEVEL=2 "$PY" -c 'import horovod, horovod.tensorflow; import tensorflow as tf, keras; print("[install] horovod", horovod.__version__, "tensorflow", tf.__version__, "keras", keras.__version__)'
CHECK=$(TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/horovodrun" --check-build)
echo "$CHECK"
for need in "${NEED[@]}"; do
  if ! grep -q "\[X\] $need" <<<"$CHECK"; then
    echo "[install] FAILED: horovodrun --check-build does not list $need as available. Rebuild with: rm -rf '$WHEEL_DIR' $BUILD_MARK && make install STACK=$STACK" >&2
    exit 1
  fi
done
echo "[install] done"

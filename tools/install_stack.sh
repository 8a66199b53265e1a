#!/usr/bin/env bash
# Installs one pinned stack into a virtual environment, then builds Horovod from source
# against it with `python -m hvdkeras.build_horovod`, which proves the build before it says done.
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
#                          against (Horovod, TF, Python, controllers, devices, a digest of the
#                          patches and flags), so a wheel built for another stack is never picked
#                          up (pip's own wheel cache is bypassed). See hvdkeras/build_horovod/.
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

if [ ! -x "$VENV/bin/python" ]; then
  echo "[install] creating $VENV with $PYTHON (stack $STACK)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
# pip warns about every package missing from a local index folder this machine may list; drop that noise.
pip_run() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

echo "[install] pinned stack $STACK (stacks/$STACK/constraints.txt)"
# The direct requirements, Horovod's own dependencies, the [spark] extra (the suite tests
# hvdkeras.spark), s3fs with moto's S3 server (the S3 store's test) and the build/test tools;
# every version comes from the constraints.
pip_run install -q -c "$CONSTRAINTS" -r "$STACK_DIR/requirements.txt" pyspark py4j pyarrow pandas fsspec s3fs "moto[server]" \
  wheel setuptools "cmake<4" pytest pytest-xdist hypothesis ruff mypy types-PyYAML types-psutil cloudpickle psutil packaging

echo "[install] hvdkeras (editable)"
pip_run install -q --no-deps --no-build-isolation -e "$HERE"
echo "$STACK" > "$VENV/.hvdkeras-stack"

# Horovod: the registry's source, patched, built against this TensorFlow, cached, installed and
# checked on two ranks, by the same command users run in their own environments.
MPI=auto
[ "${HVDKERAS_WITHOUT_MPI:-0}" = 1 ] && MPI=no
TF_CPP_MIN_LOG_LEVEL=2 "$PY" -m hvdkeras.build_horovod --mpi "$MPI"
echo "[install] done"

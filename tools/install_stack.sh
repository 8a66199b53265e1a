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
#   PYTHON                 interpreter that creates the venv (default: the stack's Python, stacks/<STACK>/python:
#                          python3.X on PATH, else pyenv's ~/.pyenv/versions/3.X.*)
#   HVDKERAS_WHEEL_CACHE   where built Horovod wheels are kept (default: ~/.cache/hvdkeras/wheels).
#                          Each wheel lives in a folder named after everything it was built
#                          against (Horovod, TF, Python, controllers, devices, a digest of the
#                          patches and flags), so a wheel built for another stack is never picked
#                          up (pip's own wheel cache is bypassed). See hvdkeras/build_horovod/.
#   HVDKERAS_WITHOUT_MPI=1 build Gloo only even where OpenMPI is installed.
#   HVDKERAS_VENV_CACHE    where a finished venv's copy is kept (default: ~/.cache/hvdkeras/venvs; off: never).
#                          A new venv whose inputs match a kept copy's is made from it (tools/venv_cache.py):
#                          then only hvdkeras's editable install and Horovod's checks run.
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
# The Python the stack's pins are for (its wheels are for that version alone).
WANT=$(tr -d '[:space:]' < "$STACK_DIR/python")
is_wanted() { "$1" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$WANT')" 2>/dev/null; }
find_python() {
  local candidate
  for candidate in "$(command -v "python$WANT" 2>/dev/null)" "${PYENV_ROOT:-$HOME/.pyenv}/versions/$WANT".*/bin/"python$WANT"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] && is_wanted "$candidate" && { echo "$candidate"; return; }
  done
}
PYTHON=${PYTHON:-$(find_python)}

# What the long part (the pinned stack, then Horovod compiled from source) needs, checked first: one line each.
prerequisite() { echo "[install] FAILED: $*" >&2; exit 2; }
[ -n "$PYTHON" ] && is_wanted "$PYTHON" \
  || prerequisite "stack $STACK is pinned for Python $WANT (found ${PYTHON:-none}$([ -n "$PYTHON" ] && echo ": $("$PYTHON" -V 2>&1)")); install it with venv (Debian/Ubuntu: python$WANT-venv; or pyenv install $WANT, or uv python install $WANT), or set PYTHON=/path/to/python$WANT"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
  || prerequisite "$PYTHON cannot make a venv with pip (no venv or ensurepip module); install python$WANT-venv"
command -v c++ >/dev/null || command -v g++ >/dev/null \
  || prerequisite "no C++ compiler (c++ or g++): Horovod is compiled from source; install g++ (Debian/Ubuntu: sudo apt-get install g++)"
command -v make >/dev/null || prerequisite "no make; install make"
TF_PIN=$(sed -n 's/^tensorflow-cpu==\([0-9.]*\).*/\1/p' "$CONSTRAINTS")
if PYTHONPATH="$HERE" "$PYTHON" -c "
import sys
from hvdkeras.build_horovod.build_plan import LLVM_HEADERS_FROM
sys.exit(tuple(int(x) for x in '$TF_PIN'.split('.')[:2]) < LLVM_HEADERS_FROM)" 2>/dev/null; then
  PYTHONPATH="$HERE" "$PYTHON" -c "from hvdkeras.build_horovod.build_plan import find_llvm_include; find_llvm_include()" \
    2>/dev/null || prerequisite "TensorFlow $TF_PIN's headers need LLVM's (llvm/ADT/ArrayRef.h) to build Horovod, and none were found: install llvm-dev (sudo make system-deps), or set HVDKERAS_LLVM_INCLUDE=<dir>"
fi
command -v java >/dev/null \
  || echo "[install] note: no java on PATH: hvdkeras.spark needs Java 17+ (sudo make system-deps installs it); the Spark tests will skip"

if [ -x "$VENV/bin/python" ] && [ -f "$VENV/pyvenv.cfg" ] && ! is_wanted "$VENV/bin/python"; then
  echo "[install] $VENV has $("$VENV/bin/python" -V 2>&1), stack $STACK wants Python $WANT: making it again"
  rm -rf "$VENV"
fi
# NEW: this run made the venv and installs everything into it; RESTORED: a venv kept from the same inputs was made
# again (tools/venv_cache.py), and only what is bound to this checkout is done below.
NEW=0 RESTORED=0
if [ ! -x "$VENV/bin/python" ]; then
  if [ ! -e "$VENV" ] && "$PYTHON" "$HERE/tools/venv_cache.py" restore "$VENV" "$STACK"; then
    RESTORED=1
  else
    echo "[install] creating $VENV with $PYTHON (stack $STACK)"
    "$PYTHON" -m venv "$VENV"
    NEW=1
  fi
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
# pip warns about every package missing from a local index folder this machine may list; drop that noise.
pip_run() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

RUNTIME_RECORD="$VENV/hvdkeras-runtime.json"
# Every package but hvdkeras's editable install and Horovod: what a kept venv already has.
install_packages() {
rm -f "$RUNTIME_RECORD"
if [ -f "$STACK_DIR/runtime.txt" ]; then
  # This stack's venv is built as a managed Spark platform's is (docs/spark-cluster.md#databricks): its runtime
  # (pyspark and what comes with it) first, then hvdkeras as that page tells platform users. What the runtime
  # had is recorded; the suite checks nothing of it changed (tests/unit/spark/test_platform_runtime.py).
  echo "[install] the platform's runtime first (stacks/$STACK/runtime.txt)"
  pip_run install -q -c "$CONSTRAINTS" -r "$STACK_DIR/runtime.txt"
  "$PY" - "$STACK_DIR/runtime.txt" "$RUNTIME_RECORD.partial" <<'PYEOF'
import importlib.metadata as m, json, re, sys
names = [re.split(r"[\[=<>;\s]", line.strip(), maxsplit=1)[0] for line in open(sys.argv[1])
         if line.strip() and not line.lstrip().startswith("#")]
json.dump({"runtime": {name: m.version(name) for name in names}}, open(sys.argv[2], "w"), indent=1)
PYEOF
fi

echo "[install] pinned stack $STACK (stacks/$STACK/constraints.txt)"
# The direct requirements, Horovod's own dependencies, the [spark] extra (the suite tests
# hvdkeras.spark), s3fs with moto's S3 server (the S3 store's test) and the build/test tools;
# every version comes from the constraints.
pip_run install -q -c "$CONSTRAINTS" -r "$STACK_DIR/requirements.txt" pyspark py4j pyarrow pandas fsspec s3fs "moto[server]" "ray[train]" \
  wheel setuptools "cmake<4" pytest pytest-xdist hypothesis ruff mypy types-PyYAML types-psutil cloudpickle psutil packaging \
  kubernetes-validate dockerfile-parse

if [ -f "$RUNTIME_RECORD.partial" ]; then
  # As a platform user installs it: hvdkeras's wheel, no extras and no constraints, over the runtime; pip's own
  # report of what it installed goes into the record. The editable install below then takes its place.
  echo "[install] hvdkeras's wheel over the platform's runtime, as docs/spark-cluster.md installs it"
  WHEELS=$(mktemp -d)
  pip_run wheel -q --no-deps --no-build-isolation -w "$WHEELS" "$HERE"
  pip_run install -q --report "$WHEELS/report.json" "$WHEELS"/hvdkeras-*.whl
  "$PY" - "$RUNTIME_RECORD.partial" "$WHEELS/report.json" "$RUNTIME_RECORD" <<'PYEOF'
import json, sys
record = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))
record["installed_with_hvdkeras"] = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}"
                                           for i in report["install"])
json.dump(record, open(sys.argv[3], "w"), indent=1)
PYEOF
  rm -rf "$WHEELS" "$RUNTIME_RECORD.partial"
fi
}
[ "$RESTORED" = 1 ] || install_packages
echo "[install] hvdkeras (editable)"
pip_run install -q --no-deps --no-build-isolation -e "$HERE"
echo "$STACK" > "$VENV/.hvdkeras-stack"

# Horovod: the registry's source, patched, built against this TensorFlow, cached, installed and
# checked on two ranks, by the same command users run in their own environments.
MPI=auto
[ "${HVDKERAS_WITHOUT_MPI:-0}" = 1 ] && MPI=no
TF_CPP_MIN_LOG_LEVEL=2 "$PY" -m hvdkeras.build_horovod --mpi "$MPI"
if [ "$NEW" = 1 ]; then
  "$PYTHON" "$HERE/tools/venv_cache.py" save "$VENV" "$STACK"
fi
echo "[install] done"

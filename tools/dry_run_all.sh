#!/usr/bin/env bash
# Every shipped config's dry run on every launcher and four host layouts, each output and launch file kept,
# so that a refactor can show its dry runs byte-identical:
#
#   tools/dry_run_all.sh CHECKOUT OUT      (e.g. a `git worktree` of the old commit, then this one)
#   diff -r OUT_OLD OUT_NEW                 (after replacing each OUT's own path in the files)
#
# PY (default: this checkout's .venv-keras3/bin/python) runs each; the dry run imports no TensorFlow.
set -uo pipefail
src=$(cd "${1:?usage: dry_run_all.sh CHECKOUT OUT}" && pwd)
out=$(mkdir -p "${2:?usage: dry_run_all.sh CHECKOUT OUT}" && cd "$2" && pwd)
PY=${PY:-$(cd "$(dirname "$0")/.." && pwd)/.venv-keras3/bin/python}
cd "$src" || exit 2
for cfg in configs/*.yaml; do
  for launcher in horovodrun mpirun slurm kubernetes; do
    for layout in "--np 1" "--np 2" "--hosts a:2,b:2 --cores_per_host 4" \
                  "--hosts a:4,b:4,c:4 --cores_per_host 8 --gpus_per_host 4"; do
      name=$(basename "$cfg" .yaml)_${launcher}_$(echo "$layout" | tr -c 'a-z0-9' '_')
      # shellcheck disable=SC2086  # the layout is several flags
      PYTHONPATH=$src "$PY" -m hvdkeras.train --config "$cfg" --dry_run --launcher "$launcher" $layout \
        --dry_run_output "$out/$name.file" > "$out/$name.out" 2>&1
      echo "rc=$?" >> "$out/$name.out"
    done
  done
done
echo "$(ls "$out" | wc -l) files in $out"

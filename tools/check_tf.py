"""The version matrix, measured cell by cell: Python x TensorFlow, each cell with pyspark 4 and 3.5.

    python tools/check_tf.py [--python 3.10 3.13] [--tf 2.20.0 2.21.0] [--pyspark 4 3.5] [--keep] [--render]
    make check-tf PYTHONS="3.10 3.13" TF="2.21.0"

For each Python and each TensorFlow, in a throwaway venv (``runs/check-tf/py<P>-tf<T>``, removed afterwards unless
``--keep``):

1. ``pip install tensorflow-cpu==<T> <this checkout>[test]`` (not editable: the patch files must come with the
   package), pip choosing Keras, NumPy and the rest. A TensorFlow that publishes no wheel for that Python makes the
   cell "no wheel", not a failure;
2. ``python -m hvdkeras.build_horovod --mpi no``: the same patches, cache and checks as ``make install``
   (``--check-build`` and its two-rank smoke check);
3. the default job on two ranks: ``horovodrun -np 2 --gloo python -m hvdkeras.train --config configs/digits.yaml``
   for two epochs;
4. for each ``--pyspark`` series in turn (``pip install "pyspark[sql]==<series>.*" fsspec tensorflow-cpu==<T>``:
   its newest release for that Python, pip changing what it must but TensorFlow):
   ``examples/spark/keras_spark_digits.py --epochs 1`` on ``local[2]``, a fit on two ranks, transform, save and
   load. A series with no release for that Python is "no wheel" there.

Each cell (built or not, each step's outcome, the build minutes, the first error line, the date) is merged into
``--results`` by (Python, TensorFlow), and the whole matrix is printed and written into ``--page`` (docs/stacks.md,
between its markers). The Pythons
come from ``PATH`` (``python3.X``) or pyenv (``~/.pyenv/versions/3.X.*``), as tools/install_stack.sh finds them.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
QUIET_PIP = "is ignored: it is neither a file nor a directory"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
TENSORFLOWS = ("2.16.2", "2.17.1", "2.18.1", "2.19.1", "2.20.0", "2.21.0")
PYSPARKS = ("4", "3.5")  # a series: each cell takes its newest release that has a wheel for the cell's Python
NO_WHEEL = "No matching distribution found for tensorflow-cpu"


def find_python(version: str) -> str | None:
    """The interpreter for ``version`` ("3.12"): ``python3.12`` on PATH, else pyenv's; None when there is none."""
    candidates = [shutil.which(f"python{version}")]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")))
    for candidate in candidates:
        if not candidate:
            continue
        probe = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def run(cmd, log, env=None, timeout=3600, cwd=REPO):
    """Runs ``cmd``, appending its output to ``log``; returns (returncode, output)."""
    try:
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=timeout)
        code, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out = -1, f"timed out after {timeout} s: {exc.output or ''}"
    out = "\n".join(ln for ln in out.splitlines() if QUIET_PIP not in ln)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\n{out}\n")
    return code, out


def last_line(text, marker=None):
    """The last non-empty line of ``text`` (holding ``marker`` when given), stripped; "" when there is none."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and (marker is None or marker in ln)]
    return lines[-1] if lines else ""


def version_of(py, package, log, env):
    """``package``'s installed version in the venv of ``py``, or None."""
    code, out = run([py, "-c", f"import importlib.metadata as m; print(m.version({package!r}))"], log, env)
    return out.strip().splitlines()[-1] if code == 0 and out.strip() else None


def new_cell(python: str, tensorflow: str) -> dict:
    """A cell not measured yet."""
    return {"python": python, "tensorflow": tensorflow, "wheel": None, "keras": None, "numpy": None, "built": False,
            "smoke_check": False, "digits": False, "spark": {}, "build_minutes": None,
            "date": datetime.date.today().isoformat(), "note": ""}


def check_cell(python: str, tensorflow: str, pysparks, work: pathlib.Path, keep: bool) -> dict:
    """Measures one cell: install, build, the two-rank job, and the Spark fit under each pyspark in turn."""
    cell = new_cell(python, tensorflow)
    venv = work / f"py{python}-tf{tensorflow}"
    log = work / f"py{python}-tf{tensorflow}.log"
    log.unlink(missing_ok=True)
    shutil.rmtree(venv, ignore_errors=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYSPARK_PYTHON", None)
    py = venv / "bin" / "python"
    interpreter = find_python(python)
    try:
        if interpreter is None:
            cell["note"] = f"no Python {python} here (python{python} on PATH or pyenv)"
            return cell
        subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
        code, out = run([py, "-m", "pip", "install", "-q", f"tensorflow-cpu=={tensorflow}", f"{REPO}[test]",
                         "wheel", "setuptools<81", "cmake<4"], log, env)
        if NO_WHEEL in out:
            cell["wheel"] = False
            cell["note"] = f"TensorFlow {tensorflow} publishes no wheel for Python {python}"
            return cell
        if code != 0:
            cell["note"] = "pip install failed: " + last_line(out)
            return cell
        cell["wheel"] = True
        cell["keras"], cell["numpy"] = version_of(py, "keras", log, env), version_of(py, "numpy", log, env)
        started = time.monotonic()
        code, out = run([py, "-m", "hvdkeras.build_horovod", "--mpi", "no"], log, env)
        cell["built"] = any("built in" in ln or "reusing the cached wheel" in ln for ln in out.splitlines())
        cell["build_minutes"] = _recorded_build_minutes(out) or round((time.monotonic() - started) / 60, 1)
        if code != 0:
            cell["note"] = last_line(out, "hvdkeras: error: ").replace("hvdkeras: error: ", "") or last_line(out)
            return cell
        cell["smoke_check"] = "passed its checks" in out
        code, out = run([venv / "bin" / "horovodrun", "-np", "2", "-H", "localhost:2", "--gloo", py, "-m",
                         "hvdkeras.train", "--config", "configs/digits.yaml", "--workdir", work / f"{venv.name}-digits",
                         "--set", "trainer.epochs=2"], log, env, timeout=900)
        cell["digits"] = code == 0
        if code != 0:
            cell["note"] = "digits job: " + (last_line(out, "rror") or last_line(out))
        for pyspark in pysparks:
            cell["spark"][pyspark] = spark_smoke(py, pyspark, tensorflow, work, log, env)
        return cell
    finally:
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)
            shutil.rmtree(work / f"{venv.name}-digits", ignore_errors=True)
        print(f"[check-tf] Python {python}, TensorFlow {tensorflow}: {cell} (log: {log})", flush=True)


def spark_smoke(py, series, tensorflow, work, log, env) -> dict:
    """The Spark quick start (fit, transform, save, load) on local[2] under the newest pyspark of ``series`` ("3.5")
    for this Python, installed first beside the cell's TensorFlow (so that pip keeps the NumPy it needs):
    ``{"ok": ..., "version": the pyspark, "numpy": the NumPy it ran with, "note": the first error line}``;
    ``"wheel": False`` when the series has no release for this Python."""
    result = {"ok": False, "version": None, "numpy": None, "note": ""}
    code, out = run([py, "-m", "pip", "install", "-q", f"pyspark[sql]=={series}.*", "fsspec",
                     f"tensorflow-cpu=={tensorflow}"], log, env)
    if "No matching distribution found for pyspark" in out:
        return dict(result, wheel=False, note=f"pyspark {series} has no release for this Python")
    if code != 0:
        result["note"] = "pip install failed: " + last_line(out)
        return result
    result["version"] = version_of(py, "pyspark", log, env)
    result["numpy"] = version_of(py, "numpy", log, env)
    store = work / f"spark-{os.getpid()}"
    try:
        code, out = run([py, "examples/spark/keras_spark_digits.py", "--epochs", "1", "--store", store], log, env,
                        timeout=900)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    result["ok"] = code == 0
    if code != 0:
        result["note"] = last_line(out, "Error") or last_line(out)
    return result


def _recorded_build_minutes(out: str):
    """The build time build_horovod recorded in the cached wheel's build.json (also when the wheel was reused)."""
    for line in out.splitlines():
        for marker in ("built in ", "reusing the cached wheel "):
            if marker in line:
                folder = line.split(marker, 1)[1].split(": ", 1)[-1].strip()
                try:
                    return round(json.loads((pathlib.Path(folder) / "build.json").read_text())["build_seconds"] / 60, 1)
                except (OSError, ValueError, KeyError):
                    return None
    return None


def summary(cell: dict | None) -> str:
    """One cell of the Markdown matrix: what was measured, and when."""
    if cell is None:
        return "not measured"
    if cell.get("wheel") is False:
        return "no wheel"
    if not cell.get("built"):
        return f"fails: {cell.get('note') or 'Horovod not built'} ({cell['date']})"
    parts = ["built" + (f" {cell['build_minutes']} min" if cell.get("build_minutes") else "")]
    if "digits" not in cell:  # an older row: the build's checks and the gradient check, no job or Spark
        checked = cell.get("smoke_check") and cell.get("gradient_check")
        return f"{parts[0]}, gradient check {'ok' if checked else 'fail'}, no job or Spark run ({cell['date']})"
    parts.append("2 ranks " + ("ok" if cell.get("digits") else "fail"))
    for series, outcome in sorted(cell.get("spark", {}).items(), key=lambda kv: _numbers(kv[0]), reverse=True):
        if outcome.get("wheel") is False:
            parts.append(f"pyspark {series}: no wheel")
        else:
            parts.append(f"pyspark {outcome.get('version') or series} " + ("ok" if outcome.get("ok") else "fail"))
    return ", ".join(parts) + f" ({cell['date']})"


def _numbers(version: str):
    return [int(x) for x in version.split(".") if x.isdigit()]


def table(cells) -> str:
    """The matrix as Markdown: a row per TensorFlow, a column per Python."""
    by_key = {(c["python"], c["tensorflow"]): c for c in cells}
    pythons = sorted({c["python"] for c in cells} | set(PYTHONS), key=_numbers)
    tensorflows = sorted({c["tensorflow"] for c in cells} | set(TENSORFLOWS), key=_numbers)
    out = ["| TensorFlow | " + " | ".join(f"Python {p}" for p in pythons) + " |",
           "| --- |" + " --- |" * len(pythons)]
    for tf in tensorflows:
        out.append(f"| {tf} | " + " | ".join(summary(by_key.get((p, tf))) for p in pythons) + " |")
    failures = [c for c in cells if c.get("built") and (c.get("note") or not c.get("digits", True)
                                                          or not all(o.get("ok") or o.get("wheel") is False
                                                                     for o in c.get("spark", {}).values()))]
    for c in sorted(failures, key=lambda c: (_numbers(c["python"]), _numbers(c["tensorflow"]))):
        notes = [c["note"]] if c.get("note") else []
        notes += [f"pyspark {o.get('version') or v}: " + (
                      f"pip replaced NumPy {c['numpy']} with {o['numpy']} for it, then " if o.get("numpy")
                      and c.get("numpy") and o["numpy"] != c["numpy"] else "") + o["note"]
                  for v, o in c.get("spark", {}).items() if o.get("note") and o.get("wheel") is not False]
        out.append(f"\n- Python {c['python']}, TensorFlow {c['tensorflow']}: " + "; ".join(notes))
    return "\n".join(out)


MATRIX_BEGIN = "<!-- matrix: generated by tools/check_tf.py from docs/compatibility.json -->"
MATRIX_END = "<!-- /matrix -->"


def with_matrix(page: str, cells) -> str:
    """``page`` (docs/stacks.md's text) with the matrix between its markers replaced by :func:`table`'s."""
    head, rest = page.split(MATRIX_BEGIN, 1)
    _, tail = rest.split(MATRIX_END, 1)
    return f"{head}{MATRIX_BEGIN}\n{table(cells)}\n{MATRIX_END}{tail}"


def load(results: pathlib.Path) -> list:
    """The cells recorded so far (rows written before the matrix had a Python column were Python 3.11's)."""
    rows = json.loads(results.read_text()) if results.exists() else []
    return [dict(r, python=r.get("python", "3.11")) for r in rows]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", nargs="+", default=list(PYTHONS), help="Pythons, e.g. 3.10 3.13")
    p.add_argument("--tf", nargs="+", default=list(TENSORFLOWS), help="TensorFlow versions, e.g. 2.20.0 2.21.0")
    p.add_argument("--pyspark", nargs="+", default=list(PYSPARKS), help="pyspark series, e.g. 4 3.5: each cell"
                   " runs the newest release of each for its Python")
    p.add_argument("--keep", action="store_true", help="keep each throwaway venv")
    p.add_argument("--render", action="store_true", help="measure nothing: rewrite --page from --results")
    p.add_argument("--work", default=str(REPO / "runs" / "check-tf"))
    p.add_argument("--results", default=str(REPO / "docs" / "compatibility.json"))
    p.add_argument("--page", default=str(REPO / "docs" / "stacks.md"), help="the page whose matrix is rewritten"
                   " ('' for none)")
    args = p.parse_args(argv)
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results = pathlib.Path(args.results)
    cells = {(c["python"], c["tensorflow"]): c for c in load(results)}
    asked = [] if args.render else [(py, tf) for py in args.python for tf in args.tf]
    for key in asked:
        cells[key] = check_cell(*key, args.pyspark, work, args.keep)
        ordered = sorted(cells.values(), key=lambda c: (_numbers(c["python"]), _numbers(c["tensorflow"])))
        results.write_text(json.dumps(ordered, indent=1) + "\n")
    print(table(list(cells.values())))
    if args.page:
        page = pathlib.Path(args.page)
        page.write_text(with_matrix(page.read_text(), list(cells.values())))
    failed = [k for k in asked if cells[k].get("wheel") is not False
              and not (cells[k]["digits"] and all(o["ok"] or o.get("wheel") is False
                                                  for o in cells[k]["spark"].values()))]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

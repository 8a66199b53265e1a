"""The compatibility matrix: Horovod 0.28.1 built and checked against one TensorFlow per run.

    python tools/check_tf.py 2.19.1 [2.20.0 ...] [--keep] [--results docs/compatibility.json]
    make check-tf TF="2.19.1 2.20.0"

For each version, in a throwaway venv (``runs/check-tf/tf-<version>``, removed afterwards
unless ``--keep``):

1. ``pip install tensorflow-cpu==<version> <this checkout>[test]`` (not editable: the
   patch files must come with the package), pip choosing Keras and NumPy for that TensorFlow;
2. ``python -m hvdkeras.build_horovod --mpi no``: the same patches, cache and checks as
   ``make install`` (``--check-build`` and the two-rank smoke check);
3. ``tests/distributed/test_gradient_exchange.py`` on two ranks (gradient_check.py:
   dense, sparse and sparse-as-dense gradients equal to the mean computed by hand,
   gradient accumulation), fp16 training left out.

The row (built or not, checks passed, build minutes, the first error line when something
failed, the date) is merged into ``--results`` by version, and the whole table is printed
as the README's Markdown.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
PYTHON = shutil.which("python3.11") or sys.executable
QUIET_PIP = "is ignored: it is neither a file nor a directory"


def run(cmd, log, env=None, timeout=3600):
    """Runs ``cmd``, appending its output to ``log``; returns (returncode, output)."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    out = "\n".join(ln for ln in (proc.stdout + proc.stderr).splitlines() if QUIET_PIP not in ln)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\n{out}\n")
    return proc.returncode, out


def last_line(text, marker=None):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and (marker is None or marker in ln)]
    return lines[-1] if lines else ""


def check(version: str, work: pathlib.Path, keep: bool) -> dict:
    venv = work / f"tf-{version}"
    log = work / f"tf-{version}.log"
    log.unlink(missing_ok=True)
    row = {"tensorflow": version, "keras": None, "built": False, "smoke_check": False, "gradient_check": False,
           "build_minutes": None, "date": datetime.date.today().isoformat(), "note": ""}
    shutil.rmtree(venv, ignore_errors=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PIP_DISABLE_PIP_VERSION_CHECK="1")
    py = venv / "bin" / "python"
    try:
        subprocess.run([PYTHON, "-m", "venv", str(venv)], check=True)
        code, out = run([py, "-m", "pip", "install", "-q", f"tensorflow-cpu=={version}", f"{REPO}[test]",
                         "wheel", "setuptools==65.5.0", "cmake<4"], log, env)
        if code != 0:
            row["note"] = "pip install failed: " + last_line(out)
            return row
        row["keras"] = run([py, "-c", "import importlib.metadata as m; print(m.version('keras'))"], log, env)[1].strip()
        started = time.monotonic()
        code, out = run([py, "-m", "hvdkeras.build_horovod", "--mpi", "no"], log, env)
        built = [ln for ln in out.splitlines() if "built in" in ln or "reusing the cached wheel" in ln]
        row["built"] = bool(built)
        row["build_minutes"] = _recorded_build_minutes(out) or round((time.monotonic() - started) / 60, 1)
        if code != 0:
            row["note"] = last_line(out, "hvdkeras: error: ").replace("hvdkeras: error: ", "")
            return row
        row["smoke_check"] = "passed its checks" in out
        code, out = run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         "tests/distributed/test_gradient_exchange.py", "-k", "not fp16"], log, env)
        row["gradient_check"] = code == 0
        if code != 0:
            row["note"] = "gradient check: " + (last_line(out, "Error") or last_line(out))
        return row
    finally:
        if not keep:
            shutil.rmtree(venv, ignore_errors=True)
        print(f"[check-tf] {version}: {row} (log: {log})", flush=True)


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


def table(rows) -> str:
    def yes(v):
        return "yes" if v else "no"

    out = ["| TensorFlow | Keras | Horovod built | smoke check | gradient check | build time | date | note |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: [int(x) for x in r["tensorflow"].split(".")]):
        minutes = f"{r['build_minutes']} min" if r.get("build_minutes") else ""
        out.append(f"| {r['tensorflow']} | {r.get('keras') or ''} | {yes(r['built'])} | {yes(r['smoke_check'])} | "
                   f"{yes(r['gradient_check'])} | {minutes} | {r['date']} | {r.get('note', '')} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("versions", nargs="+", help="TensorFlow versions, e.g. 2.19.1 2.20.0")
    p.add_argument("--keep", action="store_true", help="keep each throwaway venv")
    p.add_argument("--work", default=str(REPO / "runs" / "check-tf"))
    p.add_argument("--results", default=str(REPO / "docs" / "compatibility.json"))
    args = p.parse_args(argv)
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results = pathlib.Path(args.results)
    rows = {r["tensorflow"]: r for r in (json.loads(results.read_text()) if results.exists() else [])}
    for version in args.versions:
        rows[version] = check(version, work, args.keep)
        results.write_text(json.dumps(sorted(rows.values(), key=lambda r: r["tensorflow"]), indent=1) + "\n")
    print(table(rows.values()))
    return 0 if all(rows[v]["gradient_check"] for v in args.versions) else 1


if __name__ == "__main__":
    sys.exit(main())

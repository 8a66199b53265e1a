"""Every Python that ``requires-python`` admits, where this machine has it (PATH or pyenv): hvdkeras's modules
compile, and those that need nothing beyond the standard library import (the version matrix, ``make check-tf``,
runs the rest of each Python's cells)."""
import os
import re
import subprocess

import pytest

from tests.unit.helpers import REPO

ADMITTED = ("3.10", "3.11", "3.12", "3.13")
UNSTACKED = ("3.10", "3.13")  # the admitted Pythons no stack runs (stacks/<STACK>/python: 3.11 and 3.12)

# Imports every module of hvdkeras it can: one whose third-party package this bare Python lacks is left out.
PROBE = """
import importlib, pkgutil, sys
sys.path.insert(0, sys.argv[1])
import hvdkeras
failed = []
for info in pkgutil.walk_packages(hvdkeras.__path__, "hvdkeras."):
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "hvdkeras":
            failed.append(f"{info.name}: {exc}")
    except Exception as exc:
        failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_requires_python_is_the_versions_checked_here():
    stacked = {open(os.path.join(REPO, "stacks", name, "python")).read().strip()
               for name in os.listdir(os.path.join(REPO, "stacks"))}
    assert sorted(stacked | set(UNSTACKED)) == list(ADMITTED)
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        assert re.search(r'^requires-python = ">=3\.10,<3\.14"$', f.read(), re.M)


@pytest.mark.parametrize("version", UNSTACKED)
def test_hvdkeras_compiles_and_its_standard_library_modules_import_on_each_admitted_python(version, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_tf", os.path.join(REPO, "tools", "check_tf.py"))
    check_tf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_tf)
    python = check_tf.find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} here (python{version} on PATH or pyenv)")
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    compiled = subprocess.run([python, "-m", "compileall", "-q", os.path.join(REPO, "hvdkeras")],
                              capture_output=True, text=True, env=env)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    probe = subprocess.run([python, "-c", PROBE, REPO], capture_output=True, text=True, env=env, timeout=120,
                           cwd=str(tmp_path))
    assert probe.returncode == 0 and probe.stdout.strip() == "", probe.stdout + probe.stderr

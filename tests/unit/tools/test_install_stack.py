"""tools/install_stack.sh checks what its long part needs first: one line each, before any venv or download."""
import os
import shutil
import subprocess
import sys

import pytest

from tests.unit.helpers import REPO

SCRIPT = os.path.join(REPO, "tools", "install_stack.sh")


HERE = "%d.%d" % sys.version_info[:2]
# The stack pinned for the Python running these tests (each stack's unit tests run on its own Python).
STACK = next((name for name in sorted(os.listdir(os.path.join(REPO, "stacks")))
              if open(os.path.join(REPO, "stacks", name, "python")).read().strip() == HERE), None)
needs_own_stack = pytest.mark.skipif(STACK is None, reason=f"no stack is pinned for this Python, {HERE}")


def _install(tmp_path, stack=STACK, env=None):
    venv = tmp_path / "venv"
    out = subprocess.run(["bash", SCRIPT, str(venv), stack], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHON": sys.executable, **(env or {})})
    return out, venv


def _one_failed_line(out):
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("[install] FAILED: "), out.stderr
    return lines[0]


@pytest.mark.parametrize("stack, wanted", [("keras2", "3.11"), ("keras3", "3.12")])
def test_another_python_than_the_stacks_is_one_line_before_anything_is_made(tmp_path, stack, wanted):
    fake = tmp_path / "python3.10"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = -V ]; then echo 'Python 3.10.12'; exit 0; fi\nexit 1\n")
    fake.chmod(0o755)
    out, venv = _install(tmp_path, stack=stack, env={"PYTHON": str(fake)})
    line = _one_failed_line(out)
    assert f"stack {stack} is pinned for Python {wanted} (found {fake}: Python 3.10.12)" in line, line
    assert f"set PYTHON=/path/to/python{wanted}" in line and not venv.exists()


@needs_own_stack
def test_the_stacks_python_is_found_in_pyenv_when_it_is_not_on_the_path(tmp_path):
    root = tmp_path / "pyenv"  # a pyenv holding the stack's Python, and a PATH without it
    (root / "versions" / f"{HERE}.9" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, root / "versions" / f"{HERE}.9" / "bin" / f"python{HERE}")
    bin_dir = tmp_path / "bin"  # what the script runs, without c++: it stops right after the Python
    bin_dir.mkdir()
    for tool in ("dirname", "tr", "sed", "bash", "cat"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    out, _ = _install(tmp_path, env={"PATH": str(bin_dir), "PYENV_ROOT": str(root), "PYTHON": ""})
    assert "no C++ compiler" in _one_failed_line(out)  # past the Python check


@needs_own_stack
def test_no_compiler_is_one_line(tmp_path):
    bin_dir = tmp_path / "bin"  # what the script runs, without c++ or g++
    bin_dir.mkdir()
    for tool in ("dirname", "ls", "tr", "sed", "make", "sh", "bash", "cat"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    out, venv = _install(tmp_path, env={"PATH": str(bin_dir)})
    assert "no C++ compiler" in _one_failed_line(out) and not venv.exists()


def test_missing_llvm_headers_are_one_line_for_a_stack_whose_tensorflow_needs_them(tmp_path):
    out, venv = _install(tmp_path, stack="keras3", env={"HVDKERAS_LLVM_INCLUDE": str(tmp_path / "no-llvm"),
                                                        "PYTHON": ""})  # the stack's own Python, as make finds it
    if "is pinned for Python" in out.stderr:
        pytest.skip(f"no Python for the keras3 stack here: {out.stderr.strip()}")
    assert "headers need LLVM's (llvm/ADT/ArrayRef.h)" in _one_failed_line(out) and not venv.exists()

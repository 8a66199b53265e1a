"""tools/venv_cache.py: a venv kept after an install and made again from the same inputs, on small real venvs."""
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

from tests.unit.helpers import REPO

SPEC = importlib.util.spec_from_file_location("venv_cache", os.path.join(REPO, "tools", "venv_cache.py"))
venv_cache = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(venv_cache)

SITE = pathlib.Path("lib") / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A checkout holding only what the key reads, and a cache folder of its own."""
    root = tmp_path / "repo"
    for name, text in {"stacks/small/constraints.txt": "six==1.16.0\n", "stacks/small/python": "3.11\n",
                       "pyproject.toml": "[project]\n", "setup.py": "", "tools/install_stack.sh": "#!/bin/sh\n",
                       "hvdkeras/build_horovod/plan.py": "FLAGS = []\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.setattr(venv_cache, "REPO", root)
    monkeypatch.setenv("HVDKERAS_VENV_CACHE", str(tmp_path / "cache"))
    return root


def installed_venv(path):
    """A venv as an install leaves it: a package, a script whose #! line names this venv, the Makefile's stamp."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (path / SITE / "small.py").write_text("WHERE = __file__\n")
    script = path / "bin" / "where"
    script.write_text(f"#!{path.resolve()}/bin/python\nimport sys, small\nprint(sys.prefix, small.WHERE)\n")
    script.chmod(0o755)
    (path / ".hvdkeras-installed-mpi").touch()
    (path / ".hvdkeras-stack").write_text("small\n")
    return path


def test_a_kept_venv_is_made_again_elsewhere_linked_and_its_scripts_name_the_new_venv(repo, tmp_path):
    first = installed_venv(tmp_path / "first")
    assert "kept a copy" in venv_cache.save(first, "small")
    second = tmp_path / "clone" / ".venv"
    assert "nothing installed" in venv_cache.restore(second, "small")
    assert (second / SITE / "small.py").stat().st_ino == (first / SITE / "small.py").stat().st_ino  # a link
    out = subprocess.run([str(second / "bin" / "where")], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(second.resolve()), str((second / SITE / "small.py").resolve())]
    assert (second / ".hvdkeras-stack").read_text() == "small\n"
    assert not list(second.glob(".hvdkeras-installed-*"))  # the stamp belongs to the install that made it
    # the first venv going, as a clone's does, leaves the kept copy whole
    subprocess.run(["rm", "-rf", str(first)], check=True)
    third = tmp_path / "third"
    venv_cache.restore(third, "small")
    assert (third / SITE / "small.py").read_text() == "WHERE = __file__\n"


def test_another_pin_misses_and_an_existing_venv_is_never_restored_into(repo, tmp_path):
    venv_cache.save(installed_venv(tmp_path / "first"), "small")
    with pytest.raises(FileExistsError):
        venv_cache.restore(tmp_path / "first", "small")
    (repo / "stacks" / "small" / "constraints.txt").write_text("six==1.17.0\n")
    with pytest.raises(LookupError):
        venv_cache.restore(tmp_path / "second", "small")
    assert not (tmp_path / "second").exists()


def test_off_keeps_nothing_and_each_stack_keeps_its_two_newest(repo, tmp_path, monkeypatch):
    venv = installed_venv(tmp_path / "venv")
    monkeypatch.setenv("HVDKERAS_VENV_CACHE", "off")
    assert "off" in venv_cache.save(venv, "small")
    with pytest.raises(LookupError):
        venv_cache.restore(tmp_path / "other", "small")
    monkeypatch.setenv("HVDKERAS_VENV_CACHE", str(tmp_path / "cache"))
    keys = []
    for pin in ("1", "2", "3"):
        (repo / "stacks" / "small" / "constraints.txt").write_text(f"six=={pin}\n")
        venv_cache.save(venv, "small")
        keys.append(venv_cache.key("small"))
    kept = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert kept == sorted(f"small-{k}" for k in keys[1:])


def test_the_command_line_says_a_miss_by_its_status_and_an_unknown_stack_in_one_line(repo, tmp_path, capsys):
    assert venv_cache.main(["restore", str(tmp_path / "v"), "small"]) == 3
    assert venv_cache.main(["restore", str(tmp_path / "v"), "../etc"]) == 2
    assert capsys.readouterr().err.strip() == "[install] unknown stack '../etc'"


def test_a_cache_others_can_write_is_not_used(repo, tmp_path):
    venv_cache.save(installed_venv(tmp_path / "first"), "small")
    (tmp_path / "cache").chmod(0o777)
    with pytest.raises(PermissionError, match="writable by others"):
        venv_cache.restore(tmp_path / "second", "small")
    assert not (tmp_path / "second").exists()

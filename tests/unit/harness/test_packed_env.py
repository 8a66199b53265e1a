"""tests/harness/packed_env.py: a venv packed as Spark's ``spark.archives`` unpacks it, on a small venv of its own."""
import ctypes
import os
import shutil
import subprocess
import sys

import pytest

from tests.harness import packed_env


def small_venv(root):
    """A venv's layout: pyvenv.cfg, bin/python linked to the base interpreter, packages, an editable hvdkeras."""
    site = root / packed_env.SITE
    (site / "numpy" / "__pycache__").mkdir(parents=True)
    (site / "numpy" / "__init__.py").write_text("VALUE = 1\n")
    (site / "numpy" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"compiled")
    (site / "numpy-2.0.dist-info").mkdir()
    (site / "numpy-2.0.dist-info" / "RECORD").write_text("numpy/__init__.py,sha256=abc,10\n")
    (site / "pyspark" / "jars").mkdir(parents=True)  # the hosts' Spark brings its own
    (site / "pyspark" / "jars" / "spark-core.jar").write_bytes(b"jar")
    (site / "tensorflow" / "include").mkdir(parents=True)  # C++ headers, for building Horovod only
    (site / "tensorflow" / "include" / "tensor.h").write_text("// header\n")
    (site / "tensorflow" / "__init__.py").write_text("")
    (site / "__editable__.hvdkeras-0.1.0.pth").write_text("import finder\n")
    (site / "__editable___hvdkeras_0_1_0_finder.py").write_text("")
    (root / "bin").mkdir()
    os.symlink(packed_env.base_interpreter(), root / "bin" / "python3.11")
    os.symlink("python3.11", root / "bin" / "python")
    (root / "bin" / "pytest").write_text("#!/bin/sh\n")
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return root


def unpack(archive, into):
    """As Spark unpacks a ``.tar.gz`` of ``spark.archives`` on Linux: ``gzip -dc`` into ``tar -xf -``."""
    into.mkdir()
    subprocess.run(f"gzip -dc '{archive}' | (cd '{into}' && tar -xf -)", shell=True, check=True)
    return into


def test_the_archive_unpacks_to_a_venv_with_hvdkeras_installed_and_without_what_executors_do_not_run(tmp_path):
    venv = small_venv(tmp_path / "venv")
    cache = tmp_path / "cache"
    made = packed_env.pack(str(tmp_path / "env.tar.gz"), prefix=str(venv), cache=str(cache))
    assert not made["cached"]
    env = unpack(tmp_path / "env.tar.gz", tmp_path / "environment")
    site = env / packed_env.SITE
    assert sorted(os.listdir(site)) == ["hvdkeras", "hvdkeras-0.1.0.dist-info", "numpy", "numpy-2.0.dist-info",
                                        "tensorflow"]
    assert (site / "numpy" / "__pycache__" / "__init__.cpython-311.pyc").read_bytes() == b"compiled"
    assert os.listdir(site / "tensorflow") == ["__init__.py"]
    assert os.readlink(env / "bin" / "python") == "python3.11"  # links kept, to the base interpreter the hosts have
    assert os.readlink(env / "bin" / "python3.11") == packed_env.base_interpreter()
    assert sorted(os.listdir(env / "bin")) == ["python", "python3.11"]
    assert (site / "hvdkeras" / "__init__.py").is_file() and (site / "hvdkeras" / "resources").is_dir()
    out = subprocess.run([str(env / "bin" / "python"), "-c", "import numpy, hvdkeras; print(numpy.VALUE, "
                          "hvdkeras.__file__)"], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}).stdout.split()
    assert out == ["1", str(site / "hvdkeras" / "__init__.py")]


def test_the_packages_part_is_packed_once_for_the_same_distributions(tmp_path):
    venv = small_venv(tmp_path / "venv")
    cache = tmp_path / "cache"
    packed_env.pack(str(tmp_path / "first.tar.gz"), prefix=str(venv), cache=str(cache))
    again = packed_env.pack(str(tmp_path / "again.tar.gz"), prefix=str(venv), cache=str(cache))
    assert again["cached"]
    (venv / packed_env.SITE / "numpy-2.0.dist-info" / "RECORD").write_text("numpy/__init__.py,sha256=def,10\n")
    changed = packed_env.pack(str(tmp_path / "changed.tar.gz"), prefix=str(venv), cache=str(cache))
    assert not changed["cached"]  # another installed file: packed again
    assert len(os.listdir(cache)) == packed_env.KEEP_PACKS


def test_two_venvs_of_the_same_packages_share_the_packed_part(tmp_path):
    # A console script's RECORD line hashes its first line, which names its own venv's Python: not packed, so
    # another clone's venv of the same packages reuses the cached part.
    keys = []
    for name in ("one", "two"):
        venv = small_venv(tmp_path / name)
        record = venv / packed_env.SITE / "numpy-2.0.dist-info" / "RECORD"
        record.write_text(record.read_text() + f"../../../bin/f2py,sha256={name},40\n")
        keys.append(packed_env.key(str(venv)))
    assert keys[0] == keys[1]


def test_a_name_belongs_to_its_distribution():
    assert packed_env._owner("pyspark-4.0.1.dist-info") == "pyspark"
    assert packed_env._owner("_pytest") == "_pytest" and packed_env._owner("pillow.libs") == "pillow"
    assert packed_env._left_out("__editable___hvdkeras_0_1_0_finder.py")
    assert not packed_env._left_out("numpy") and not packed_env._left_out(f"{sys.implementation.name}.pth")


@pytest.mark.skipif(not (shutil.which("cc") and shutil.which("strip")), reason="needs cc and strip (binutils)")
def test_a_large_shared_library_goes_in_without_its_symbol_table_and_still_loads(tmp_path, monkeypatch):
    venv = small_venv(tmp_path / "venv")
    (tmp_path / "answer.c").write_text("int answer(void) { return 42; }\n")
    library = venv / packed_env.SITE / "numpy" / "libanswer.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(tmp_path / "answer.c")], check=True)
    os.chmod(library, 0o644)
    monkeypatch.setattr(packed_env, "STRIP_FROM", os.path.getsize(library))  # this one, and no smaller file
    packed_env.pack(str(tmp_path / "env.tar.gz"), prefix=str(venv), cache=str(tmp_path / "cache"))
    packed = unpack(tmp_path / "env.tar.gz", tmp_path / "environment") / packed_env.SITE / "numpy" / "libanswer.so.1"
    assert os.path.getsize(packed) < os.path.getsize(library)
    assert b".symtab" in library.read_bytes() and b".symtab" not in packed.read_bytes()
    assert os.stat(packed).st_mode & 0o777 == 0o644  # the library's own mode, not strip's output's
    assert ctypes.CDLL(str(packed)).answer() == 42

"""tools/check_tf.py, the version matrix: its cells as Markdown, the Pythons it finds, and what a cell without a
TensorFlow wheel records (measured through a stand-in pip, not a real install)."""
import importlib.util
import os
import pathlib
import sys

from tests.unit.helpers import REPO

SPEC = importlib.util.spec_from_file_location("check_tf", os.path.join(REPO, "tools", "check_tf.py"))
check_tf = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(check_tf)


def cell(python, tf, **kw):
    return dict(check_tf.new_cell(python, tf), date="2026-12-02", **kw)


def test_each_cell_says_what_was_measured_and_when():
    cells = [cell("3.12", "2.21.0", wheel=True, built=True, digits=True, build_minutes=1.5, numpy="2.4.6",
                  spark={"3.5": {"ok": False, "version": "3.5.9", "numpy": "1.26.4",
                                 "note": "ModuleNotFoundError: No module named 'distutils'"},
                         "4": {"ok": True, "version": "4.3.0", "note": ""}}),
             cell("3.10", "2.20.0", wheel=True, built=True, digits=True,
                  spark={"4": {"ok": False, "wheel": False, "note": "pyspark 4 has no release for this Python"}}),
             cell("3.13", "2.16.2", wheel=False),
             cell("3.10", "2.21.0", note="Horovod did not build")]
    text = check_tf.table(cells)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| 2.")}
    assert set(rows) == set(check_tf.TENSORFLOWS)
    assert rows["2.21.0"] == ("| 2.21.0 | fails: Horovod did not build (2026-12-02) | not measured | built 1.5 min,"
                              " 2 ranks ok, pyspark 4.3.0 ok, pyspark 3.5.9 fail (2026-12-02) | not measured |")
    assert "| no wheel |" in rows["2.16.2"]
    assert "| built, 2 ranks ok, pyspark 4: no wheel (2026-12-02) |" in rows["2.20.0"]
    assert text.endswith("- Python 3.12, TensorFlow 2.21.0: pyspark 3.5.9: pip replaced NumPy 2.4.6 with 1.26.4 for"
                         " it, then ModuleNotFoundError: No module named 'distutils'")


def test_rows_from_before_the_python_column_are_python_3_11s(tmp_path):
    results = tmp_path / "compatibility.json"
    results.write_text('[{"tensorflow": "2.20.0", "built": true, "smoke_check": true, "gradient_check": true,'
                       ' "build_minutes": 1.6, "date": "2026-11-26", "note": ""}]')
    (row,) = check_tf.load(results)
    assert row["python"] == "3.11"
    assert check_tf.summary(row) == "built 1.6 min, gradient check ok, no job or Spark run (2026-11-26)"


def test_the_running_python_is_found_by_its_version_and_a_missing_one_is_none(monkeypatch, tmp_path):
    here = "%d.%d" % sys.version_info[:2]
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(pathlib.Path(sys.executable).parent))
    (tmp_path / f"python{here}").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert check_tf.find_python(here) == str(tmp_path / f"python{here}")
    assert check_tf.find_python("3.99") is None


def test_a_tensorflow_without_a_wheel_for_the_python_is_no_wheel_not_a_failure(monkeypatch, tmp_path):
    def fake_run(cmd, log, env=None, timeout=3600, cwd=check_tf.REPO):
        return 1, "ERROR: No matching distribution found for tensorflow-cpu==2.16.2"

    monkeypatch.setattr(check_tf, "run", fake_run)
    monkeypatch.setattr(check_tf.subprocess, "run", lambda *a, **kw: None)  # the venv
    monkeypatch.setattr(check_tf, "find_python", lambda version: sys.executable)
    got = check_tf.check_cell("3.13", "2.16.2", ["4"], tmp_path, keep=False)
    assert got["wheel"] is False and got["note"] == "TensorFlow 2.16.2 publishes no wheel for Python 3.13"
    assert check_tf.summary(got) == "no wheel"


def test_docs_stacks_matrix_is_what_the_tool_makes_of_the_recorded_cells():
    page = open(os.path.join(REPO, "docs", "stacks.md")).read()
    cells = check_tf.load(pathlib.Path(REPO, "docs", "compatibility.json"))
    assert check_tf.with_matrix(page, cells) == page, "run: python3 tools/check_tf.py --render"

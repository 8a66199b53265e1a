"""hvdkeras.engines.python_check: what a worker's Python runs, asked there and compared with the driver's."""
import sys

from hvdkeras.engines.python_check import python_mismatch, python_probe

DRIVER = {"python": "/venv/bin/python", "python_version": "3.11", "horovod": "0.28.1", "tensorflow": "2.21.0",
          "hvdkeras": "0.9.0"}


def test_a_worker_python_with_what_a_rank_needs_passes_whatever_its_path():
    assert python_mismatch(DRIVER, dict(DRIVER, python="/opt/other/bin/python3")) is None


def test_what_a_worker_python_lacks_or_has_at_other_versions_is_named():
    bare = dict(DRIVER, python="/usr/bin/python3", horovod=None, hvdkeras=None)
    assert python_mismatch(DRIVER, bare) == "lacks horovod and hvdkeras"
    older = dict(DRIVER, python_version="3.10", tensorflow="2.15.1")
    assert python_mismatch(DRIVER, older) == ("has Python 3.10 (the driver runs 3.11), tensorflow 2.15.1 (the driver"
                                              " has 2.21.0)")
    assert python_mismatch(DRIVER, dict(older, hvdkeras=None)) == (
        "lacks hvdkeras; has Python 3.10 (the driver runs 3.11), tensorflow 2.15.1 (the driver has 2.21.0)")


def test_the_probe_runs_in_a_python_without_hvdkeras_and_describes_it():
    import json
    import os
    import subprocess

    import cloudpickle

    found = next(python_probe()(None))
    assert found["python"] == sys.executable and found["hvdkeras"] and found["tensorflow"]
    assert found["python_version"] == "%d.%d" % sys.version_info[:2]
    # A Python that cannot import hvdkeras (no site: its editable install is not on the path) still runs it.
    code = ("import json, pickle, sys; sys.path.append(sys.argv[1]); probe = pickle.loads(sys.stdin.buffer.read());"
            " found = next(probe(None)); assert 'hvdkeras' not in sys.modules; print(json.dumps(found))")
    out = subprocess.run([sys.executable, "-S", "-c", code, os.path.dirname(os.path.dirname(cloudpickle.__file__))],
                         input=cloudpickle.dumps(python_probe()), capture_output=True, check=True, timeout=60)
    assert json.loads(out.stdout)["python"] == sys.executable

"""The wheel is the product: hvdkeras and what its own commands need, and no lab, benchmark or test code."""
import os
import pathlib
import shutil
import zipfile

import pytest

from tests.harness.wheel import build_wheel
from tests.unit.helpers import REPO

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="lists the project's files with git")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from the project's tracked files (a clean copy, as a clone has)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def wheel_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def test_the_wheel_holds_only_the_package(wheel_names):
    outside = [n for n in wheel_names if not n.startswith(("hvdkeras/", "hvdkeras-"))]
    assert outside == []
    for word in ("benchmarks/", "/bench/", "lab/", "shaper", "namespace", "tests/", "recipes"):
        assert not [n for n in wheel_names if word in n], word


def test_no_file_of_the_wheel_builds_hosts_shapes_links_or_runs_a_slurm_cluster(wheel):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".py"):
                text = z.read(name).decode()
                for lab_only in ("netns", "qdisc", "slurmctld", "munged"):
                    assert lab_only not in text, (name, lab_only)


def test_the_wheel_holds_what_its_commands_need(wheel_names):
    for needed in ("hvdkeras/discover_hosts.py",  # elastic launch lines name it
                   "hvdkeras/input_bench.py",  # python -m hvdkeras.input_bench
                   "hvdkeras/resources/digits.csv.gz",  # the default job's data
                   "hvdkeras/launch/slurm.sbatch", "hvdkeras/launch/slurm_signals.sh",  # the Slurm script
                   "hvdkeras/launch/slurm_requeue.sh"):
        assert needed in wheel_names
    patches = sorted(p.name for p in (pathlib.Path(REPO) / "hvdkeras" / "build_horovod" / "patches").glob("*.patch"))
    assert patches and all(f"hvdkeras/build_horovod/patches/{p}" in wheel_names for p in patches)
    configs = sorted(p.name for p in (pathlib.Path(REPO) / "hvdkeras" / "resources" / "configs").glob("*.yaml"))
    # --config digits finds them by name
    assert "digits.yaml" in configs and all(f"hvdkeras/resources/configs/{c}" in wheel_names for c in configs)


def test_the_wheel_carries_the_one_version(wheel_names, wheel):
    import hvdkeras

    assert os.path.basename(wheel).startswith(f"hvdkeras-{hvdkeras.__version__}-")


def test_setup_py_defers_to_pyproject():
    # Tools and habits that call setup.py get the one version pyproject.toml declares, and nothing is left behind.
    import subprocess
    import sys

    import hvdkeras

    before = set(os.listdir(REPO))
    out = subprocess.run([sys.executable, "setup.py", "--version"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == hvdkeras.__version__
    assert set(os.listdir(REPO)) == before  # no egg-info, no build folder

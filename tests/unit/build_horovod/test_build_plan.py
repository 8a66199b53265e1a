"""hvdkeras.build_horovod.build_plan: supported range, build environment, cache key."""
import dataclasses
import subprocess
import sys

import pytest

from hvdkeras.build_horovod import BuildError
from hvdkeras.build_horovod import build_plan as plans
from tests.unit.helpers import cpu_build_plan

CPU = cpu_build_plan()


@pytest.mark.parametrize("version", ["2.15.1", "2.16.2", "2.19.0", "2.21.0", "2.21.1rc0"])
def test_supported_versions_pass(version):
    plans.check_supported(version)


@pytest.mark.parametrize("version", ["2.14.1", "2.22.0", "3.0.0"])
def test_unsupported_version_is_one_line_naming_the_range(version):
    with pytest.raises(BuildError) as err:
        plans.check_supported(version)
    message = str(err.value)
    assert "\n" not in message
    assert f"TensorFlow {version} is not supported" in message and "2.15 to 2.21" in message


def test_build_env_cpu_gloo_only():
    env = plans.build_env(CPU)
    assert env["HOROVOD_WITH_TENSORFLOW"] == env["HOROVOD_WITH_GLOO"] == env["HOROVOD_WITHOUT_MPI"] == "1"
    assert "HOROVOD_WITH_MPI" not in env and "HOROVOD_GPU_OPERATIONS" not in env
    assert env["CXXFLAGS"].split() == [f"-I{d}" for d in CPU.include_dirs]


def test_build_env_mpi_gpu_and_user_flags():
    plan = dataclasses.replace(CPU, mpi=True, gpu=True, nccl_home="/v/site-packages/nvidia/nccl", extra_cxxflags="-O3")
    env = plans.build_env(plan)
    assert env["HOROVOD_WITH_MPI"] == "1" and "HOROVOD_WITHOUT_MPI" not in env
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert env["HOROVOD_NCCL_INCLUDE"] == "/v/site-packages/nvidia/nccl/include"
    assert env["HOROVOD_NCCL_LINK"] == "SHARED"
    assert env["CXXFLAGS"].endswith(" -O3")


def test_build_id_names_what_matters_and_changes_with_everything_else():
    base = plans.build_id(CPU, "p1")
    assert base.startswith("horovod-0.28.1-tensorflow-cpu-2.21.0-py311-gloo-cpu-")
    changed = [plans.build_id(CPU, "p2"),  # a patch changed
               plans.build_id(dataclasses.replace(CPU, tf_version="2.20.0"), "p1"),
               plans.build_id(dataclasses.replace(CPU, mpi=True), "p1"),
               plans.build_id(dataclasses.replace(CPU, gpu=True), "p1"),
               plans.build_id(dataclasses.replace(CPU, compiler="g++ 13.1"), "p1"),
               plans.build_id(dataclasses.replace(CPU, extra_cxxflags="-O0"), "p1"),
               plans.build_id(dataclasses.replace(CPU, include_dirs=CPU.include_dirs[:1]), "p1")]
    assert len({base, *changed}) == len(changed) + 1


def test_build_id_is_the_same_in_every_venv_with_that_tensorflow():
    other = dataclasses.replace(CPU, include_dirs=("/elsewhere/.venv/lib/python3.11/site-packages/tensorflow/include/"
                                                   "external/highwayhash", "/usr/lib/llvm-14/include"))
    assert plans.build_id(other, "p1") == plans.build_id(CPU, "p1")


def test_llvm_include_from_the_environment_variable(tmp_path, monkeypatch):
    (tmp_path / "llvm" / "ADT").mkdir(parents=True)
    (tmp_path / "llvm" / "ADT" / "ArrayRef.h").write_text("")
    monkeypatch.setenv("HVDKERAS_LLVM_INCLUDE", str(tmp_path))
    assert plans.find_llvm_include() == str(tmp_path)


def test_llvm_include_variable_without_headers_echoes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HVDKERAS_LLVM_INCLUDE", str(tmp_path))
    with pytest.raises(BuildError, match=f"Received: HVDKERAS_LLVM_INCLUDE={tmp_path}$"):
        plans.find_llvm_include()


def test_discover_reads_the_installed_tensorflow_without_importing_it():
    code = ("import sys, importlib.metadata as m; from hvdkeras.build_horovod import build_plan as plan; "
            "p = plan.discover(mpi='no'); "
            "assert 'tensorflow' not in sys.modules and 'horovod' not in sys.modules; "
            "assert p.tf_version == m.version(p.tf_distribution), p; print(p.tf_version)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    import importlib.metadata

    assert out.stdout.strip() in {importlib.metadata.version(d) for d in ("tensorflow-cpu", "tensorflow")
                                  if _installed(d)}


def _installed(dist):
    import importlib.metadata

    try:
        importlib.metadata.version(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_mpi_yes_without_openmpi_says_what_to_install(monkeypatch):
    monkeypatch.setattr(plans, "mpi_available", lambda: False)
    with pytest.raises(BuildError, match="--mpi yes, but OpenMPI's mpicxx and mpirun are not on PATH"):
        plans.discover(mpi="yes")

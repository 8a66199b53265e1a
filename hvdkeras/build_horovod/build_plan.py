"""What a Horovod build is made of: versions, controllers, devices, include directories.

:func:`discover` reads the environment (which TensorFlow is installed, whether OpenMPI
and LLVM's headers are there) into a :class:`BuildPlan`; everything after that is pure:
:func:`build_env` turns a plan into the environment of the compile, and
:func:`build_id` names the cache folder after everything the wheel depends on, so a
wheel built against another TensorFlow, other flags or other patches is never reused.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

from hvdkeras.build_horovod import BuildError
from hvdkeras.common import stack

HOROVOD_VERSION = "0.28.1"
# The registry's source distribution the patches were written against (sha256 of horovod-0.28.1.tar.gz).
HOROVOD_SDIST_SHA256 = "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"
# TensorFlow minor versions this build was run against (README, "Supported versions"): first and last, inclusive.
SUPPORTED_TF = ((2, 15), (2, 21))
# TensorFlow's pip packages; the first one installed is the one built against.
TF_DISTRIBUTIONS = stack.TF_DISTRIBUTIONS
# From 2.19, TensorFlow's XLA headers include LLVM's (llvm/ADT/...) and its wheel does not ship them.
LLVM_HEADERS_FROM = (2, 19)
# Headers TensorFlow's own headers include by paths tf.sysconfig does not report (needed from 2.19; harmless before).
TF_EXTRA_INCLUDES = ("external/highwayhash", "external/farmhash_archive/src")


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    """What a Horovod build is made against: TensorFlow, Python, controllers, devices, compiler, flags."""

    tf_distribution: str        # e.g. "tensorflow-cpu"
    tf_version: str             # e.g. "2.21.0"
    python_tag: str             # e.g. "py311"
    mpi: bool                   # build the MPI controller too (Gloo always)
    gpu: bool                   # CUDA + NCCL allreduce
    include_dirs: tuple[str, ...] = ()  # extra -I directories for the compile
    nccl_home: str | None = None  # NCCL headers and library for a GPU build (None: Horovod's own search)
    compiler: str = ""          # first line of `c++ --version`
    extra_cxxflags: str = ""    # the user's CXXFLAGS, kept

    @property
    def controllers(self) -> str:
        """The controllers built: ``gloo`` or ``gloo-mpi``."""
        return "gloo-mpi" if self.mpi else "gloo"

    @property
    def devices(self) -> str:
        """The devices built for: ``cpu`` or ``gpu-nccl``."""
        return "gpu-nccl" if self.gpu else "cpu"


def tf_minor(version: str) -> tuple[int, int]:
    """The (major, minor) of a TensorFlow version string."""
    major, minor = version.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()))


def supported_range() -> str:
    """The supported TensorFlow versions, as text (``2.x to 2.y``)."""
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_TF
    return f"{lo_major}.{lo_minor} to {hi_major}.{hi_minor}"


def check_supported(tf_version: str) -> None:
    """Raises BuildError unless ``tf_version`` is in SUPPORTED_TF."""
    lo, hi = SUPPORTED_TF
    if not lo <= tf_minor(tf_version) <= hi:
        raise BuildError(
            f"TensorFlow {tf_version} is not supported: hvdkeras builds Horovod {HOROVOD_VERSION} against "
            f"TensorFlow {supported_range()}; install one of those (e.g. pip install tensorflow-cpu==2.21.0)"
        )


def build_env(plan: BuildPlan) -> dict[str, str]:
    """The environment variables of the compile (added to the caller's environment)."""
    env = {
        "HOROVOD_WITH_TENSORFLOW": "1",
        "HOROVOD_WITH_GLOO": "1",
        "HOROVOD_WITHOUT_PYTORCH": "1",
        "HOROVOD_WITHOUT_MXNET": "1",
        ("HOROVOD_WITH_MPI" if plan.mpi else "HOROVOD_WITHOUT_MPI"): "1",
        "CXXFLAGS": " ".join([f"-I{d}" for d in plan.include_dirs]
                             + ([plan.extra_cxxflags] if plan.extra_cxxflags else [])),
    }
    if plan.gpu:
        env["HOROVOD_GPU_OPERATIONS"] = "NCCL"
        if plan.nccl_home:
            # The nvidia-nccl-cu12 wheel has include/nccl.h and lib/libnccl.so.2 (no libnccl.so, no static
            # library): link it shared; the builder adds HOROVOD_NCCL_LIB, a folder with a libnccl.so link.
            env["HOROVOD_NCCL_INCLUDE"] = os.path.join(plan.nccl_home, "include")
            env["HOROVOD_NCCL_LINK"] = "SHARED"
    return env


def build_id(plan: BuildPlan, patch_digest: str) -> str:
    """The cache folder's name: readable fields, then a digest of everything else the wheel depends on."""
    everything = dict(dataclasses.asdict(plan), horovod=HOROVOD_VERSION, sdist=HOROVOD_SDIST_SHA256,
                      patches=patch_digest, env=build_env(plan))
    # TensorFlow's own include folder counts by what it is, not by which venv holds it: every checkout and
    # venv with the same TensorFlow shares the wheel.
    text = re.sub(r"[^\s\"]*?/site-packages/tensorflow/include", "<tensorflow>/include",
                  json.dumps(everything, sort_keys=True))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return (f"horovod-{HOROVOD_VERSION}-{plan.tf_distribution}-{plan.tf_version}-{plan.python_tag}"
            f"-{plan.controllers}-{plan.devices}-{digest}")


# ---- reading the environment -------------------------------------------------------------------

def installed_tensorflow() -> tuple[str, str]:
    """(distribution, version) of the TensorFlow in this interpreter's environment."""
    for name in TF_DISTRIBUTIONS:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise BuildError(
        f"TensorFlow is not installed for {sys.executable}: install TensorFlow {supported_range()} first "
        "(e.g. pip install tensorflow-cpu==2.21.0), then run python -m hvdkeras.build_horovod again"
    )


def tf_include_root() -> str:
    """TensorFlow's include folder in this interpreter's environment.

            Raises:
                BuildError: TensorFlow's package folder was not found.
    """
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise BuildError(f"TensorFlow's package folder was not found for {sys.executable}; reinstall TensorFlow")
    return os.path.join(list(spec.submodule_search_locations)[0], "include")


def find_llvm_include() -> str:
    """A folder holding LLVM's headers (llvm/ADT/ArrayRef.h): $HVDKERAS_LLVM_INCLUDE, llvm-config, /usr/lib/llvm-*."""
    def has_headers(d: str) -> bool:
        return bool(d) and os.path.isfile(os.path.join(d, "llvm", "ADT", "ArrayRef.h"))

    given = os.environ.get("HVDKERAS_LLVM_INCLUDE")
    if given:
        if not has_headers(given):
            raise BuildError(f"HVDKERAS_LLVM_INCLUDE has no llvm/ADT/ArrayRef.h; point it at LLVM's include folder. "
                             f"Received: HVDKERAS_LLVM_INCLUDE={given}")
        return given
    configs = ["llvm-config"] + [f"llvm-config-{v}" for v in range(21, 10, -1)]
    for tool in filter(None, map(shutil.which, configs)):
        out = subprocess.run([tool, "--includedir"], capture_output=True, text=True).stdout.strip()
        if has_headers(out):
            return out
    for d in sorted(glob.glob("/usr/lib/llvm-*/include"), reverse=True):
        if has_headers(d):
            return d
    raise BuildError(
        "TensorFlow 2.19+ headers need LLVM's headers (llvm/ADT/ArrayRef.h) and none were found: install them "
        "(Debian/Ubuntu: sudo apt-get install llvm-dev, or sudo make system-deps) or set HVDKERAS_LLVM_INCLUDE=<dir>"
    )


def find_nccl_home() -> str | None:
    """The NCCL of TensorFlow's GPU wheels (nvidia-nccl-cu12: nvidia/nccl/{include,lib}), if it carries nccl.h."""
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations if spec and spec.submodule_search_locations else []):
        home = os.path.join(base, "nccl")
        if os.path.isfile(os.path.join(home, "include", "nccl.h")):
            return home
    return None


def mpi_available() -> bool:
    """Whether OpenMPI's ``mpicxx`` and ``mpirun`` are on PATH."""
    return bool(shutil.which("mpicxx") and shutil.which("mpirun"))


def compiler_version() -> str:
    """The first line of the C++ compiler's ``--version`` (``$CXX``, else ``c++`` or ``g++``).

            Raises:
                BuildError: No C++ compiler was found.
    """
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise BuildError("no C++ compiler found (c++ or g++): install one (Debian/Ubuntu: sudo apt-get install g++)")
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0].strip() if out else cxx


def discover(mpi: str = "auto", gpu: bool = False) -> BuildPlan:
    """The plan for this interpreter's environment. ``mpi``: "auto" (if OpenMPI is installed), "yes" or "no"."""
    dist, version = installed_tensorflow()
    check_supported(version)
    if mpi == "yes" and not mpi_available():
        raise BuildError("--mpi yes, but OpenMPI's mpicxx and mpirun are not on PATH: install OpenMPI "
                         "(Debian/Ubuntu: sudo apt-get install openmpi-bin libopenmpi-dev) or use --mpi no")
    root = tf_include_root()
    includes = [os.path.join(root, sub) for sub in TF_EXTRA_INCLUDES if os.path.isdir(os.path.join(root, sub))]
    if tf_minor(version) >= LLVM_HEADERS_FROM:
        includes.append(find_llvm_include())
    nccl_home = None
    if gpu:
        nccl_home = find_nccl_home()
    return BuildPlan(
        tf_distribution=dist, tf_version=version, python_tag=f"py{sys.version_info[0]}{sys.version_info[1]}",
        mpi=mpi == "yes" or (mpi == "auto" and mpi_available()), gpu=gpu, include_dirs=tuple(includes),
        nccl_home=nccl_home, compiler=compiler_version(), extra_cxxflags=os.environ.get("CXXFLAGS", "").strip(),
    )

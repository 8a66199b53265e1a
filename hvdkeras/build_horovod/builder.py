"""Download, patch, compile, cache and install Horovod for one :class:`~.plan.BuildPlan`.

Cache layout (default ``~/.cache/hvdkeras/wheels``, or ``$HVDKERAS_WHEEL_CACHE``)::

    sdist/horovod-0.28.1.tar.gz           the registry's source, checked by its sha256
    <build id>/horovod-0.28.1-*.whl       one wheel per build id (see plan.build_id)
    <build id>/build.json                 what it was built against, patches included, and the wheel's sha256
    <build id>/build.log                  the compiler's output

A folder appears under its build id only once its wheel is complete, so an interrupted
build never leaves a wheel that looks usable. pip's own wheel cache is bypassed: it keys
wheels by name and version only and would hand over one built against another TensorFlow.

Nothing unchecked runs or installs: pip downloads the sdist with the pinned SHA-256 as a
required hash, which it compares before it prepares anything (an sdist's metadata can run
its setup code), and a cached wheel is installed only when it has the SHA-256 recorded when
it was built. A cache other users can write to is refused: they could plant a Horovod.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Sequence

from hvdkeras.build_horovod import BuildError
from hvdkeras.build_horovod import patches as patch_files
from hvdkeras.build_horovod.build_plan import HOROVOD_SDIST_SHA256, HOROVOD_VERSION, BuildPlan, build_env, build_id

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "hvdkeras", "wheels")
# Which build id the Horovod installed in this environment came from.
INSTALLED_MARK = pathlib.Path(sys.prefix) / ".hvdkeras-horovod-build"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def log(message: str) -> None:
    """Prints one ``[build_horovod]`` progress line."""
    print(f"[build_horovod] {message}", flush=True)


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """The wheel cache folder: ``cache_dir``, else ``$HVDKERAS_WHEEL_CACHE``, else ``~/.cache/hvdkeras/wheels``."""
    return pathlib.Path(cache_dir or os.environ.get("HVDKERAS_WHEEL_CACHE") or DEFAULT_CACHE)


def _sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_cache(root: pathlib.Path) -> None:
    """Raises BuildError if another user could write into the cache ``root`` (or its nearest existing parent)."""
    path = root
    while not path.exists() and path.parent != path:
        path = path.parent
    st = path.stat()
    if st.st_mode & 0o022 and not (st.st_mode & 0o1000):  # group- or world-writable, not sticky
        raise BuildError(f"the wheel cache {path} can be written by other users (mode {st.st_mode & 0o777:o}), who"
                         " could plant a Horovod there: chmod go-w it, or pass --cache-dir a folder of your own")
    if path == root and st.st_uid != os.getuid():
        raise BuildError(f"the wheel cache {path} belongs to another user (uid {st.st_uid}): pass --cache-dir a"
                         " folder of your own")


def fetch_sdist(root: pathlib.Path) -> pathlib.Path:
    """The registry's horovod-0.28.1.tar.gz, downloaded once into the cache and checked by its digest.

    pip gets the pinned SHA-256 as a required hash and compares it as the file arrives, before it prepares the
    sdist's metadata, which can run its setup code: a source with another digest never runs.
    """
    target = root / "sdist" / f"horovod-{HOROVOD_VERSION}.tar.gz"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            log(f"downloading the horovod=={HOROVOD_VERSION} source distribution")
            pinned = os.path.join(tmp, "pinned.txt")
            with open(pinned, "w") as f:
                f.write(f"horovod=={HOROVOD_VERSION} --hash=sha256:{HOROVOD_SDIST_SHA256}\n")
            download = os.path.join(tmp, "download")
            proc = subprocess.run(PIP + ["download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
                                         "--require-hashes", "-r", pinned, "-d", download],
                                  capture_output=True, text=True)
            found = glob.glob(os.path.join(download, f"horovod-{HOROVOD_VERSION}.tar.gz"))
            if "DO NOT MATCH THE HASHES" in proc.stderr:
                found_digest = re.search(r"Got\s+([0-9a-f]{64})", proc.stderr)
                served = found_digest.group(1)[:16] if found_digest else "?"
                raise BuildError(f"the package index's horovod-{HOROVOD_VERSION}.tar.gz is not the registry's (sha256 "
                                 f"{served}..., expected {HOROVOD_SDIST_SHA256[:16]}...):"
                                 " refused before any of it ran; check where pip downloads from (PIP_INDEX_URL,"
                                 " PIP_FIND_LINKS)")
            if proc.returncode != 0 or not found:
                last = (proc.stderr.strip().splitlines() or ["no file downloaded"])[-1]
                raise BuildError(f"could not download horovod=={HOROVOD_VERSION}'s source from the package index:"
                                 f" {last}")
            os.replace(found[0], target)
    got = _sha256(target)
    if got != HOROVOD_SDIST_SHA256:
        raise BuildError(f"{target} is not the registry's horovod-{HOROVOD_VERSION}.tar.gz (sha256 {got[:16]}..., "
                         f"expected {HOROVOD_SDIST_SHA256[:16]}...): delete it and run again")
    return target


def cached_wheel(folder: pathlib.Path) -> pathlib.Path | None:
    """The folder's wheel when it has the SHA-256 its ``build.json`` recorded when it was built; None when the folder
    holds no wheel or was built before digests were recorded (build it again).

    Raises:
        BuildError: the wheel differs from what was built (one line naming it).
    """
    wheels = sorted(folder.glob("horovod-*.whl"))
    try:
        with open(folder / "build.json") as f:
            recorded = json.load(f).get("wheel_sha256")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if not wheels or not isinstance(recorded, str):
        return None
    got = _sha256(wheels[0])
    if len(wheels) != 1 or got != recorded:
        raise BuildError(f"the cached wheel {wheels[0]} is not the one built there (sha256 {got[:16]}..., recorded "
                         f"{recorded[:16]}...): nothing installed; delete {folder} or pass --rebuild")
    return wheels[0]


def compile_error(log_text: str, source_dir: str = "") -> str:
    """The build's first real error on one line (compiler, then CMake, then linker, then pip's last word),
    with the temporary source path removed."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for pattern in (r":\d+(:\d+)?: (fatal )?error: ", r"CMake Error", r"undefined reference to", r"\berror\b"):
        found = [ln for ln in lines if re.search(pattern, ln)]
        if found:
            line = found[0]
            break
    else:
        line = lines[-1] if lines else "no output"
    if source_dir:
        line = line.replace(source_dir.rstrip("/") + "/", "")
    return re.sub(r"\s+", " ", line)[:400]


def _nccl_link_dir(plan: BuildPlan, work: str) -> dict[str, str]:
    """A folder with ``libnccl.so`` pointing at the wheel's ``libnccl.so.2`` (CMake looks for the unversioned name)."""
    if not (plan.gpu and plan.nccl_home):
        return {}
    real = sorted(glob.glob(os.path.join(plan.nccl_home, "lib", "libnccl.so*")))
    if not real:
        raise BuildError(f"{plan.nccl_home} has nccl.h but no lib/libnccl.so*: reinstall nvidia-nccl-cu12")
    link_dir = os.path.join(work, "nccl-lib")
    os.makedirs(link_dir)
    os.symlink(real[0], os.path.join(link_dir, "libnccl.so"))
    return {"HOROVOD_NCCL_LIB": link_dir}


def build_wheel(plan: BuildPlan, root: pathlib.Path, selected: Sequence[patch_files.Patch]) -> pathlib.Path:
    """Builds (or finds in the cache) the wheel for ``plan`` with ``selected`` patches; returns its folder."""
    bid = build_id(plan, patch_files.digest(selected))
    folder = root / bid
    check_cache(root)
    if cached_wheel(folder) is not None:
        log(f"reusing the cached wheel {folder}")
        return folder
    if folder.exists():
        log(f"building {folder} again: its wheel has no recorded SHA-256 (built before digests were kept)")
    sdist = fetch_sdist(root)
    root.mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"{bid}.", dir=root)
    try:
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        source = os.path.join(work, f"horovod-{HOROVOD_VERSION}")
        patch_files.apply(selected, source)
        env = dict(os.environ, **build_env(plan), **_nccl_link_dir(plan, work))
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env.setdefault("MAKEFLAGS", f"-j{os.cpu_count() or 2}")
        out = os.path.join(work, "out")
        log(f"building Horovod {HOROVOD_VERSION} against {plan.tf_distribution} {plan.tf_version} "
            f"({plan.controllers}, {plan.devices}; patches: {', '.join(p.name[:4] for p in selected) or 'none'}); "
            f"2-5 minutes on 2 cores; log: {work}/build.log")
        started = time.monotonic()
        with open(os.path.join(work, "build.log"), "w") as logf:
            wheel = ["wheel", "-v", "--no-build-isolation", "--no-cache-dir", "--no-deps", "-w", out, source]
            proc = subprocess.run(PIP + wheel, env=env, stdout=logf, stderr=subprocess.STDOUT)
        seconds = time.monotonic() - started
        built = glob.glob(os.path.join(out, "horovod-*.whl"))
        if proc.returncode != 0 or not built:
            failed = root / f"{bid}.failed"
            shutil.rmtree(failed, ignore_errors=True)
            os.makedirs(failed)
            shutil.copy(os.path.join(work, "build.log"), failed / "build.log")
            error = compile_error(open(os.path.join(work, "build.log"), errors="replace").read(), source)
            raise BuildError(f"Horovod {HOROVOD_VERSION} did not build against TensorFlow {plan.tf_version}: {error} "
                             f"(full log: {failed / 'build.log'})")
        staged = os.path.join(work, "staged")
        os.makedirs(staged)
        shutil.move(built[0], staged)
        shutil.move(os.path.join(work, "build.log"), staged)
        with open(os.path.join(staged, "build.json"), "w") as f:
            json.dump(dict(dataclasses.asdict(plan), build_id=bid, horovod=HOROVOD_VERSION,
                           patches=[p.name for p in selected], build_seconds=round(seconds),
                           wheel_sha256=_sha256(os.path.join(staged, os.path.basename(built[0])))), f, indent=1)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staged, folder)  # the folder appears only complete
        log(f"built in {seconds / 60:.1f} min: {folder}")
        return folder
    finally:
        shutil.rmtree(work, ignore_errors=True)


def installed_build() -> str:
    """The build id of the Horovod this builder installed in this environment (empty if none)."""
    try:
        return INSTALLED_MARK.read_text().strip()
    except OSError:
        return ""


def install(folder: pathlib.Path) -> None:
    """Installs the folder's wheel into this environment unless it is already the installed build."""
    bid = folder.name
    wheel = cached_wheel(folder)
    if wheel is None:
        raise BuildError(f"{folder} holds no wheel with a recorded SHA-256: build it again (--rebuild)")
    if installed_build() == bid and _imports("horovod.tensorflow"):
        log(f"Horovod from {bid} is already installed")
        return
    proc = subprocess.run(PIP + ["install", "-q", "--no-cache-dir", "--force-reinstall", "--no-deps", str(wheel)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["exit " + str(proc.returncode)])[-1]
        raise BuildError(f"pip could not install {wheel.name}: {last}")
    INSTALLED_MARK.write_text(bid + "\n")
    log(f"installed {wheel.name} ({bid})")


def _imports(module: str) -> bool:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True).returncode == 0

"""The patch files applied to Horovod's source before it is built (``patches/*.patch``).

Each file starts with a header (what TensorFlow changed, which versions need it, where
upstream discusses it) and a ``Builds: all`` or ``Builds: gpu`` line, followed by a
unified diff against the registry's ``horovod-0.28.1`` source, applied in name order
with ``patch -p1``. The digest of the selected files is part of the wheel cache key, so
a changed patch rebuilds.

For testing that a broken build is caught, never for real builds:
``HVDKERAS_HOROVOD_SKIP_PATCHES=0002,...`` leaves out the patches whose names start with
those prefixes, and ``HVDKERAS_HOROVOD_EXTRA_PATCHES=<file>,...`` adds patch files (same
header) to the shipped ones.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import subprocess
from typing import Sequence

from hvdkeras.build_horovod import BuildError

PATCH_DIR = pathlib.Path(__file__).with_name("patches")
SKIP_ENV = "HVDKERAS_HOROVOD_SKIP_PATCHES"
EXTRA_ENV = "HVDKERAS_HOROVOD_EXTRA_PATCHES"
# The patch whose rendezvous requires the job's secret: skipped only with OPEN_ENV=1, and the build says so.
AUTH_PATCH = "0010-rendezvous-answers-only-the-job.patch"
OPEN_ENV = "HVDKERAS_ALLOW_OPEN_RENDEZVOUS"  # hvdkeras.common.horovod_env.OPEN_RENDEZVOUS_ENV


@dataclasses.dataclass(frozen=True)
class Patch:
    """One patch file of the Horovod source and the builds it applies to (``all`` or ``gpu``)."""

    path: pathlib.Path
    builds: str  # "all" or "gpu"

    @property
    def name(self) -> str:
        """The patch's file name."""
        return self.path.name


def read(path: str | os.PathLike[str]) -> Patch:
    """Reads a patch file's ``Builds:`` header line.

            Raises:
                BuildError: The header has no ``Builds: all`` or ``Builds: gpu`` line.
    """
    path = pathlib.Path(path)
    for line in path.read_text().splitlines():
        if line.startswith("Builds:"):
            builds = line.split(":", 1)[1].strip()
            if builds not in ("all", "gpu"):
                break
            return Patch(path, builds)
        if line.startswith(("--- ", "diff ")):
            break
    raise BuildError(f"patch file has no 'Builds: all' or 'Builds: gpu' line in its header. Received: {path}")


def select(gpu: bool, patch_dir: str | os.PathLike[str] = PATCH_DIR, skip: str | None = None,
           extra: str | None = None) -> list[Patch]:
    """The patches for a CPU (``gpu=False``) or GPU build, in name order: the shipped ones minus
    ``$HVDKERAS_HOROVOD_SKIP_PATCHES``, plus ``$HVDKERAS_HOROVOD_EXTRA_PATCHES``."""
    skip = os.environ.get(SKIP_ENV, "") if skip is None else skip
    extra = os.environ.get(EXTRA_ENV, "") if extra is None else extra
    prefixes = tuple(p.strip() for p in skip.split(",") if p.strip())
    paths = list(pathlib.Path(patch_dir).glob("*.patch"))
    for name in (e.strip() for e in extra.split(",") if e.strip()):
        if not os.path.isfile(name):
            raise BuildError(f"{EXTRA_ENV} names a patch file that does not exist. Received: {name}")
        paths.append(pathlib.Path(name))
    chosen = [read(p) for p in sorted(paths, key=lambda p: p.name)]
    kept = [p for p in chosen if (gpu or p.builds == "all") and not (prefixes and p.name.startswith(prefixes))]
    shipped = (pathlib.Path(patch_dir) / AUTH_PATCH).is_file()
    if shipped and AUTH_PATCH not in {p.name for p in kept} and os.environ.get(OPEN_ENV) != "1":
        raise BuildError(f"{SKIP_ENV}={skip} leaves out {AUTH_PATCH}, without which every Gloo rendezvous answers"
                         f" anyone who reaches its port; set {OPEN_ENV}=1 too to build such a Horovod anyway")
    return kept


def open_rendezvous(selected: Sequence[Patch], patch_dir: str | os.PathLike[str] = PATCH_DIR) -> bool:
    """Whether a build of ``selected`` serves an open rendezvous (the shipped :data:`AUTH_PATCH` left out)."""
    return (pathlib.Path(patch_dir) / AUTH_PATCH).is_file() and AUTH_PATCH not in {p.name for p in selected}


def digest(patches: Sequence[Patch]) -> str:
    """sha256 over the selected patch files' names and contents."""
    h = hashlib.sha256()
    for p in patches:
        h.update(p.name.encode() + b"\0" + p.path.read_bytes() + b"\0")
    return h.hexdigest()


def apply(patches: Sequence[Patch], source_dir: str | os.PathLike[str]) -> None:
    """Applies ``patches`` to the unpacked source in ``source_dir``; a patch that does not apply is a BuildError."""
    tool = shutil.which("patch")
    if tool is None:
        raise BuildError("the 'patch' program is needed to patch Horovod's source: install it "
                         "(Debian/Ubuntu: sudo apt-get install patch)")
    for p in patches:
        proc = subprocess.run([tool, "-p1", "--forward", "--batch", "--input", str(p.path)], cwd=source_dir,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            detail = (proc.stdout + proc.stderr).strip().splitlines()
            raise BuildError(f"patch {p.name} does not apply to Horovod's source in {source_dir}: "
                             f"{detail[-1] if detail else 'exit ' + str(proc.returncode)}")

"""This venv packed for Spark's ``spark.archives``, as venv-pack packs one, for executors that cannot see the venv.

PySpark's guide ("Python Package Management") ships a job's Python packages as a packed virtual environment:
``spark.archives=env.tar.gz#environment``, each executor unpacks it in its working folder, and
``spark.pyspark.python=./environment/bin/python`` runs it. :func:`pack` writes such an archive of this venv:
``pyvenv.cfg``, ``bin/python*`` (links to the base interpreter, which the hosts have, as venv-pack requires) and
``lib/python3.11/site-packages``, with hvdkeras in it as ``pip install hvdkeras`` puts it there.

Why not venv-pack itself: this venv holds hvdkeras *editable* (a path finder into the checkout, which a cluster's
hosts do not have), and venv-pack's gzip at level 4 took about 100 s for this venv. Here the archive is two gzip
members, which ``gzip -dc`` (what Spark's unpacking runs for a ``.tar.gz``) reads as one tar stream:

* the third-party packages, compressed at level 1 by ``gzip`` and kept in ``~/.cache/hvdkeras/packs`` under a key
  of every installed distribution's ``RECORD`` (its files and their hashes), so a second ``make test`` on the same
  pinned stack packs them once (20-30 s the first time); the tar's end-of-archive blocks are left out;
* hvdkeras from this checkout, packed on each call (a second or two), then the end of the archive.

Left out, besides hvdkeras's editable finder: pyspark (each host's Spark brings its own ``pyspark.zip``, which the
executors' Python workers import), tools no executor runs (:data:`LEFT_OUT`) and TensorFlow's C++ headers
(:data:`LEFT_OUT_FOLDERS`). The compiled modules (``__pycache__``) go in. The large shared libraries go in without
their symbol tables (:data:`STRIP_FROM`; ``strip --strip-unneeded``, as Linux distributions ship theirs), which only
debuggers read: TensorFlow's ``libtensorflow_cc.so.2`` alone carries 195 MB of them. Every executor unpacks the
archive, and its ``gzip -dc | tar -x`` takes time in proportion to what comes out.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import BinaryIO, Iterator, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "hvdkeras", "packs")
FORMAT = 4  # in the key: a change to what goes in the archive packs again
# site-packages entries no executor needs: Spark's own Python (the hosts' Spark brings it), build and test tools.
# Each executor unpacks the archive (the driver too), some 13 s for 1.8 GB here, again after an executor is lost.
LEFT_OUT = ("pyspark", "cmake", "moto", "cfnlint", "sympy", "networkx", "mypy", "mypyc", "ruff", "hypothesis", "pip",
            "setuptools", "_pytest", "pytest", "clang", "libclang", "matplotlib", "fonttools", "pygments",
            "tensorflow_datasets")
# Folders inside packages that no executor reads: TensorFlow's C++ headers (for building Horovod).
LEFT_OUT_FOLDERS = (os.path.join("tensorflow", "include"),)
# Shared libraries (``*.so``, ``*.so.N``) of this many bytes or more are packed stripped of their symbol tables, where
# ``strip`` is installed (binutils, which Horovod's build needs): some 235 MB of 1.56 GB for this venv.
STRIP_FROM = 32 << 20
SITE = os.path.join("lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
KEEP_PACKS = 2  # the newest packs kept in the cache


class _Counting:
    """A write-only stream that counts what it passes on (``tarfile`` asks where it is)."""

    def __init__(self, out: BinaryIO):
        self.out, self.written = out, 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.written += len(data)
        return len(data)

    def tell(self) -> int:
        return self.written


def _owner(name: str) -> str:
    """The distribution name a site-packages entry belongs to, for :data:`LEFT_OUT` (``pyspark-4.0.dist-info`` is
    pyspark's; ``_pytest`` is its own)."""
    for suffix in (".dist-info", ".egg-info", ".pth", ".py", ".libs"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            if suffix in (".dist-info", ".egg-info"):
                name = name.rsplit("-", 1)[0]
    return name.lower().replace("-", "_")


def _left_out(name: str) -> bool:
    owner = _owner(name)
    return owner in LEFT_OUT or "__mypyc" in name or name.startswith("__editable__") or owner == "hvdkeras"


def _third_party(prefix: str) -> List[str]:
    """The site-packages entries that go in the cached part, sorted."""
    return sorted(n for n in os.listdir(os.path.join(prefix, SITE)) if not _left_out(n))


def key(prefix: str = sys.prefix) -> str:
    """What the cached part depends on: the interpreter, :data:`FORMAT`, what is left out and each packed
    distribution's ``RECORD``, but for the files it installed outside site-packages (``../../../bin/...``), which
    are not packed and whose hashes differ between two venvs of the same packages: a script's first line names its
    venv's Python. With them, each fresh clone's ``make test`` packed again."""
    digest = hashlib.sha256(f"{FORMAT} {sys.version} {LEFT_OUT} {LEFT_OUT_FOLDERS}".encode())
    site = os.path.join(prefix, SITE)
    for name in _third_party(prefix):
        digest.update(name.encode())
        record = os.path.join(site, name, "RECORD")
        if name.endswith(".dist-info") and os.path.isfile(record):
            with open(record, "rb") as f:
                inside = [line for line in f.read().splitlines() if not line.startswith(b"../")]
            digest.update(hashlib.sha256(b"\n".join(inside)).digest())
    return digest.hexdigest()[:24]


def _walk(root: str, arcroot: str) -> Iterator[Tuple[str, str]]:
    """(path, name in the archive) of every file, link and folder under ``root`` but :data:`LEFT_OUT_FOLDERS`.

    The compiled ``__pycache__`` go too: without them each rank's Python compiles TensorFlow's and Keras' modules
    again at every import (8.2 s against 3.9 s, ``PYTHONDONTWRITEBYTECODE`` being set)."""
    yield root, arcroot
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, os.path.dirname(root))
        dirs[:] = sorted(d for d in dirs if os.path.join(rel, d) not in LEFT_OUT_FOLDERS)
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(folder, name)
            yield path, os.path.join(arcroot, os.path.relpath(path, root))


def _strippable(path: str, strip_from: int) -> bool:
    """Whether ``path`` is a shared library of ``strip_from`` bytes or more (not a link), packed stripped."""
    name = os.path.basename(path)
    return (name.endswith(".so") or ".so." in name) and not os.path.islink(path) and os.path.isfile(path) \
        and os.path.getsize(path) >= strip_from


def _gzip_tar(target: str, members: Iterator[Tuple[str, str]], end: bool) -> None:
    """``members`` as a tar stream through ``gzip -1`` into ``target``; the end-of-archive blocks only with
    ``end``; shared libraries of :data:`STRIP_FROM` bytes or more stripped of their symbol tables where ``strip`` is
    installed, with their own names, modes and times."""
    strip, strip_from = shutil.which("strip"), STRIP_FROM
    with open(target, "wb") as out, tempfile.TemporaryDirectory() as scratch:
        proc = subprocess.Popen(["gzip", "-1", "-c"], stdin=subprocess.PIPE, stdout=out)
        assert proc.stdin is not None
        stream = _Counting(proc.stdin)  # type: ignore[arg-type]
        tar = tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT)  # type: ignore[call-overload]
        for path, name in members:
            stripped = os.path.join(scratch, "stripped")
            if strip and _strippable(path, strip_from) and subprocess.run(
                    [strip, "--strip-unneeded", "-o", stripped, path], capture_output=True).returncode == 0:
                info = tar.gettarinfo(path, arcname=name)
                info.size = os.path.getsize(stripped)
                with open(stripped, "rb") as f:
                    tar.addfile(info, f)
                os.remove(stripped)
            else:
                tar.add(path, arcname=name, recursive=False)
        if end:
            tar.close()
        proc.stdin.close()
        if proc.wait() != 0:
            raise RuntimeError(f"gzip failed ({proc.returncode}) writing {target}")


def _dependencies(prefix: str, target: str) -> None:
    def members() -> Iterator[Tuple[str, str]]:
        yield os.path.join(prefix, "pyvenv.cfg"), "pyvenv.cfg"
        yield os.path.join(prefix, "bin"), "bin"
        for name in sorted(os.listdir(os.path.join(prefix, "bin"))):
            if name.startswith("python"):
                yield os.path.join(prefix, "bin", name), os.path.join("bin", name)
        for folder in ("lib", os.path.dirname(SITE), SITE):
            yield os.path.join(prefix, folder), folder
        for name in _third_party(prefix):
            yield from _walk(os.path.join(prefix, SITE, name), os.path.join(SITE, name))

    _gzip_tar(target, members(), end=False)


def _hvdkeras(target: str, work: str) -> None:
    """hvdkeras from this checkout as pip installs it: the package and a ``dist-info`` with its version."""
    sys.path.insert(0, REPO)
    try:
        from hvdkeras import __version__ as version
    finally:
        sys.path.remove(REPO)
    info = os.path.join(work, f"hvdkeras-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: hvdkeras\nVersion: {version}\n")
    with open(os.path.join(info, "top_level.txt"), "w") as f:
        f.write("hvdkeras\n")
    members = [*_walk(os.path.join(REPO, "hvdkeras"), os.path.join(SITE, "hvdkeras")),
               *_walk(info, os.path.join(SITE, os.path.basename(info)))]
    _gzip_tar(target, iter(members), end=True)


def pack(out: str, prefix: str = sys.prefix, cache: str = CACHE) -> dict:
    """Writes the archive of the venv at ``prefix`` to ``out`` (a ``.tar.gz``); what it took:
    ``{"bytes", "cached", "seconds"}`` (``cached``: the third-party part came from ``cache``)."""
    began = time.time()
    os.makedirs(cache, exist_ok=True)
    deps = os.path.join(cache, f"site-{key(prefix)}.tar.gz.part")
    cached = os.path.isfile(deps)
    if not cached:
        partial = f"{deps}.{os.getpid()}"
        try:
            _dependencies(prefix, partial)
            os.replace(partial, deps)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
        for old in sorted((os.path.join(cache, n) for n in os.listdir(cache) if n.endswith(".tar.gz.part")),
                          key=os.path.getmtime)[:-KEEP_PACKS]:
            os.remove(old)
    os.utime(deps)  # the newest used is the last removed
    with tempfile.TemporaryDirectory() as work:
        own = os.path.join(work, "hvdkeras.tar.gz")
        _hvdkeras(own, work)
        with open(out, "wb") as f:
            for part in (deps, own):
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 22)
    return {"bytes": os.path.getsize(out), "cached": cached, "seconds": round(time.time() - began, 1)}


def base_interpreter(prefix: str = sys.prefix) -> str:
    """The interpreter the venv's ``bin/python`` links to, which every host must have (as with venv-pack)."""
    return os.path.realpath(os.path.join(prefix, "bin", "python"))


if __name__ == "__main__":
    print(pack(sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "hvdkeras-env.tar.gz")))

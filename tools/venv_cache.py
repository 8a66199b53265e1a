"""A stack's finished venv, kept and made again from the same inputs without installing anything.

    python tools/venv_cache.py restore VENV STACK     exit 0: VENV made from a kept copy; 3: none kept
    python tools/venv_cache.py save VENV STACK        keep VENV's copy (after tools/install_stack.sh made it)

tools/install_stack.sh calls both with the stack's Python. A copy is kept under a key that digests everything the
install reads: the stack's folder (its pins, its runtime, its Python's series), pyproject.toml and setup.py, the
install script and this file, hvdkeras/build_horovod/ (the patches and the build's flags), the interpreter (its path
and full version), the machine, and the switches that change Horovod's build (OpenMPI found, HVDKERAS_WITHOUT_MPI,
HVDKERAS_LLVM_INCLUDE). Any change of them misses, and the install runs as on a new machine.

Restoring makes a new venv with the interpreter, links the kept copy's files into it (hard links: no copy of the
gigabytes, as uv's cache does), and writes its scripts again with this venv's path in their ``#!`` line. What is
bound to a checkout, hvdkeras's editable install, and the proof of Horovod's build are done again by the install
script afterwards. pip never writes through an installed file: it removes a file before writing its new content, and
Python writes its bytecode to a new file that replaces the old one, so a venv made from a copy cannot change the copy.

``HVDKERAS_VENV_CACHE`` is the folder (default ``~/.cache/hvdkeras/venvs``); ``off`` keeps and restores nothing. The
two newest copies of each stack are kept.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
ORIGIN = ".hvdkeras-venv-origin"  # in a kept copy: the venv path its scripts' #! lines name
KEPT_PER_STACK = 2
# Files of a venv that belong to one install in one place, never kept: the Makefile's stamps.
NOT_KEPT = (".hvdkeras-installed-",)


def cache_root() -> pathlib.Path | None:
    """The folder the copies are kept in, or None when ``HVDKERAS_VENV_CACHE=off``."""
    value = os.environ.get("HVDKERAS_VENV_CACHE", "")
    if value == "off":
        return None
    return pathlib.Path(value) if value else pathlib.Path.home() / ".cache" / "hvdkeras" / "venvs"


def inputs(stack: str) -> list[pathlib.Path]:
    """The checkout's files whose content decides what the install puts into a stack's venv."""
    files = sorted((REPO / "stacks" / stack).iterdir())
    files += [REPO / "pyproject.toml", REPO / "setup.py", REPO / "tools" / "install_stack.sh"]
    files += sorted(p for p in (REPO / "hvdkeras" / "build_horovod").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts)
    return [f for f in files if f.is_file()]


def key(stack: str) -> str:
    """The digest of the stack's install inputs, this file, this interpreter and the build's switches."""
    digest = hashlib.sha256(pathlib.Path(__file__).read_bytes())
    for path in inputs(stack):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    for value in (os.path.realpath(sys.executable), sys.version, platform.machine(),
                  "mpi" if shutil.which("mpicxx") else "no-mpi",
                  os.environ.get("HVDKERAS_WITHOUT_MPI", ""), os.environ.get("HVDKERAS_LLVM_INCLUDE", "")):
        digest.update(value.encode() + b"\0")
    return digest.hexdigest()[:20]


def _rewrite_script(source: pathlib.Path, target: pathlib.Path, origin: str, venv: str) -> None:
    """Copies a bin/ entry; a script whose #! line names the kept venv names ``venv`` instead."""
    with open(source, "rb") as f:
        head = f.read(len(origin) + 2)
    if head == b"#!" + origin.encode():
        content = source.read_bytes()
        first, _, rest = content.partition(b"\n")
        target.write_bytes(b"#!" + venv.encode() + first[2 + len(origin):] + b"\n" + rest)
        shutil.copymode(source, target)
    else:
        os.link(source, target)


def restore(venv: pathlib.Path, stack: str) -> str:
    """Makes ``venv`` (which must not exist) from the kept copy for this stack's inputs.

    Returns:
        What was done, one line; raises LookupError when no copy is kept for these inputs.
    """
    root = cache_root()
    kept = root / f"{stack}-{key(stack)}" if root else None
    if root is None or kept is None or not (kept / ORIGIN).is_file():
        raise LookupError("no kept venv for these inputs")
    for folder in (root, kept):  # a copy someone else could have changed is code this venv would run
        st = folder.stat()
        if st.st_mode & 0o022 or st.st_uid != os.getuid():
            raise PermissionError(f"{folder} is writable by others or not yours (mode {st.st_mode & 0o777:o},"
                                  f" uid {st.st_uid}); chmod go-w it or set HVDKERAS_VENV_CACHE to a folder of yours")
    if venv.exists():
        raise FileExistsError(f"{venv} exists: a kept venv is only restored into a new one")
    origin = (kept / ORIGIN).read_text().strip()
    target = str(venv.resolve())
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        for entry in kept.iterdir():
            if entry.name in (ORIGIN, "bin", "pyvenv.cfg") or entry.name.startswith(NOT_KEPT):
                continue
            if entry.is_dir() and not entry.is_symlink():
                # cp -al: each file a hard link, each folder new
                subprocess.run(["cp", "-al", f"{entry}/.", str(venv / entry.name)], check=True)
            elif not (venv / entry.name).exists() and not (venv / entry.name).is_symlink():
                shutil.copy2(entry, venv / entry.name, follow_symlinks=False)
        for script in (kept / "bin").iterdir():
            if not (venv / "bin" / script.name).exists() and not (venv / "bin" / script.name).is_symlink():
                if script.is_symlink() or script.is_dir():
                    continue  # the interpreter's links: the new venv has its own
                _rewrite_script(script, venv / "bin" / script.name, origin, target)
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    return f"{venv} made from the kept venv {kept} (nothing installed)"


def save(venv: pathlib.Path, stack: str) -> str:
    """Keeps a copy of ``venv`` (hard links) under this stack's key; the oldest beyond the newest two go.

    Returns:
        What was done, one line.
    """
    root = cache_root()
    if root is None:
        return "HVDKERAS_VENV_CACHE=off: no copy kept"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    kept = root / f"{stack}-{key(stack)}"
    partial = pathlib.Path(tempfile.mkdtemp(prefix=f".{stack}-", dir=root))
    try:
        for entry in venv.iterdir():
            if entry.name.startswith(NOT_KEPT):
                continue
            if entry.is_dir() and not entry.is_symlink():
                subprocess.run(["cp", "-al", str(entry), str(partial / entry.name)], check=True)
            else:
                shutil.copy2(entry, partial / entry.name, follow_symlinks=False)
        (partial / ORIGIN).write_text(str(venv.resolve()) + "\n")
        if kept.exists():
            shutil.rmtree(kept)
        partial.rename(kept)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    others = sorted((p for p in root.glob(f"{stack}-*") if p != kept and (p / ORIGIN).is_file()),
                    key=lambda p: (p / ORIGIN).stat().st_mtime, reverse=True)
    for old in others[KEPT_PER_STACK - 1:]:
        shutil.rmtree(old, ignore_errors=True)
    return f"kept a copy of {venv} in {kept}"


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("restore", "save"):
        print("usage: venv_cache.py restore|save VENV STACK", file=sys.stderr)
        return 2
    action, venv, stack = argv[0], pathlib.Path(argv[1]), argv[2]
    if not re.fullmatch(r"[A-Za-z0-9_-]+", stack) or not (REPO / "stacks" / stack / "constraints.txt").is_file():
        print(f"[install] unknown stack {stack!r}", file=sys.stderr)
        return 2
    if action == "save":
        try:
            print("[install] " + save(venv, stack))
        except (OSError, subprocess.CalledProcessError) as e:  # the install stands; only the next one is slower
            print(f"[install] note: no copy of {venv} kept ({e})", file=sys.stderr)
        return 0
    try:
        print("[install] " + restore(venv, stack))
    except LookupError:
        return 3
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"[install] the kept venv was not used ({e}); installing", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A writer killed inside :func:`hvdkeras.common.workdir.atomic_save`: ``python -m tests.unit.common.killed_writer
KIND STEP PATH``.

Writes the new version of ``PATH`` (``KIND``: ``file``, ``folder`` or ``prefix``, a TensorFlow weights prefix) and
SIGKILLs its own process at ``STEP``, the way a preemption or the OOM killer ends a rank: no ``finally``, no
``atexit``. The steps, in the order the write takes them:

* ``before-data``: the staging folder made, nothing written in it;
* ``after-data``: the new version written in the staging folder, not yet synced;
* ``after-commit``: synced and committed, nothing moved into place;
* ``after-first-rename``: the first rename done (a folder's old version moved aside, a prefix's first file moved);
* ``after-rename``: everything moved into place, the staging folder not yet removed.

No TensorFlow: the prefix is its files' names, as TensorFlow lays them out.
"""
import os
import signal
import sys

from hvdkeras.common import workdir

STEPS = ("before-data", "after-data", "after-commit", "after-first-rename", "after-rename")
NEW = "new"


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def write(kind: str, path: str, text: str) -> None:
    """The version ``text`` of a target of ``kind`` at ``path`` (as ``save`` writes it)."""
    if kind == "file":
        with open(path, "w") as f:
            f.write(text)
    elif kind == "folder":
        os.makedirs(path)
        for name in ("saved_model.pb", "variables"):
            with open(os.path.join(path, name), "w") as f:
                f.write(f"{text} {name}")
    else:
        for suffix in (".data-00000-of-00001", ".index"):
            with open(path + suffix, "w") as f:
                f.write(f"{text} {suffix}")
        with open(os.path.join(os.path.dirname(path), "checkpoint"), "w") as f:
            f.write(f'model_checkpoint_path: "{path}"\n')


def main(kind: str, step: str, path: str) -> None:
    real_rename, real_replace, real_move = os.rename, os.replace, workdir._move_into_place
    renames = []

    def renamed(real):
        def rename(source, target):
            real(source, target)
            renames.append(target)
            if step == "after-first-rename" and len(renames) == 1:
                die()
        return rename

    def move(staging, directory, base):
        if step == "after-commit":
            die()
        real_move(staging, directory, base)
        if step == "after-rename":
            die()

    os.rename, os.replace = renamed(real_rename), renamed(real_replace)
    workdir._move_into_place = move

    def save(tmp):
        if step == "before-data":
            die()
        write(kind, tmp, NEW)
        if step == "after-data":
            die()

    workdir.atomic_save(path, save)


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Builds Horovod 0.28.1 from its PyPI source against the TensorFlow already installed.

    python -m hvdkeras.build_horovod [--gpu] [--mpi auto|yes|no] [--cache-dir DIR]

Horovod's last release does not build from pip against TensorFlow 2.19 or newer. This
command downloads the registry's ``horovod==0.28.1`` source distribution (checked by
its digest), applies the patch files in ``patches/`` (each says what TensorFlow changed
and which versions need it), builds a wheel with the include directories current
TensorFlow needs, keeps it in a cache keyed by everything it was built against, installs
it, and proves it: ``horovodrun --check-build`` and a two-rank check of allreduce
(dense and sparse), grouped_allreduce and broadcast against exact values.
``make install`` runs the same command for the pinned stacks.

Modules: :mod:`.build_plan` (pure: versions, flags, cache key), :mod:`.patches` (the patch
files), :mod:`.builder` (download, patch, compile, cache, install), :mod:`.checks`
(``--check-build`` and the two-rank check), :mod:`.smoke_check` (what each rank runs).
Only smoke_check (run on the ranks) imports TensorFlow or Horovod.
"""


from hvdkeras.common.errors import HvdkerasError


class BuildError(HvdkerasError):
    """A build or check failed; the message is one line saying what and how to fix it."""

"""Fixtures shared by the distributed test files."""
import shutil

import pytest

from tests.harness.ranks import horovodrun, train_args

# The settings of the shared two-epoch run (besides no progress bars): every checkpoint kept.
TWO_EPOCHS = ("trainer.epochs=2", "checkpoint.keep=0")


@pytest.fixture(scope="session")
def digits_two_epochs(tmp_path_factory):
    """The digits job trained for two epochs on two ranks, once per session (settings ``TWO_EPOCHS``).

    Returns ``copy_to(workdir)``, which copies that finished workdir (config.yaml, metrics.jsonl and
    the checkpoints of epochs 1 and 2) to ``workdir`` and returns it as a ``pathlib.Path``: a test that
    starts from a written checkpoint resumes, damages or measures its own copy instead of training
    the same two epochs again.
    """
    original = tmp_path_factory.mktemp("digits-two-epochs") / "work"
    horovodrun(train_args(original, *TWO_EPOCHS), timeout=240)

    def copy_to(workdir):
        shutil.copytree(original, workdir)
        return workdir

    return copy_to

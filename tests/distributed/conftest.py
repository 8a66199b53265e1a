"""Fixtures shared by the distributed test files."""
import shutil

import pytest

from tests.harness.ranks import horovodrun
from tests.harness.reports import DIGITS

# The settings of the shared two-epoch run: every checkpoint kept, no progress bars.
TWO_EPOCHS = ("trainer.epochs=2", "checkpoint.keep=0", "trainer.verbose=0")


@pytest.fixture(scope="session")
def digits_two_epochs(tmp_path_factory):
    """The digits job trained for two epochs on two ranks, once per session (settings ``TWO_EPOCHS``).

    Returns ``copy_to(workdir)``, which copies that finished workdir (config.yaml, metrics.jsonl and
    the checkpoints of epochs 1 and 2) to ``workdir`` and returns it as a ``pathlib.Path``: a test that
    starts from a written checkpoint resumes, damages or measures its own copy instead of training
    the same two epochs again.
    """
    original = tmp_path_factory.mktemp("digits-two-epochs") / "work"
    args = ["-m", "hvdkeras.train", "--config", DIGITS, "--workdir", str(original)]
    for setting in TWO_EPOCHS:
        args += ["--set", setting]
    horovodrun(args, timeout=240)

    def copy_to(workdir):
        shutil.copytree(original, workdir)
        return workdir

    return copy_to

"""python -m hvdkeras.evaluate: absl flags of its own; every error a user can fix is one line on stderr, exit status
2, no traceback, before TensorFlow loads. (The evaluation itself, on two ranks: tests/distributed.)"""
import os
import subprocess
import sys

import pytest

from hvdkeras import evaluate
from hvdkeras.common import command_line
from tests.unit.helpers import REPO, write_yaml


def run_evaluate(*args):
    """``python -m hvdkeras.evaluate ARGS`` in this process: its exit status."""
    return command_line.call(evaluate.main, evaluate.FLAGS, ["python -m hvdkeras.evaluate", *args])


def test_a_bad_config_is_one_line_status_2_and_no_traceback(tmp_path):
    path = write_yaml(tmp_path, "optimizer: {lr: 0.1}\n")
    proc = subprocess.run([sys.executable, "-m", "hvdkeras.evaluate", "--config", path, "--workdir",
                           str(tmp_path / "w")], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"hvdkeras: error: unknown key 'optimizer.lr' in {path}")
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("args, says", [
    ((), "--config and --workdir are required, e.g. --config configs/digits.yaml --workdir runs/digits"),
    (("--config", "configs/digits.yaml"), "--workdir is required"),
    (("--config", "configs/digits.yaml", "--workdir", "w", "trainer.epochs=3"),
     "unexpected arguments trainer.epochs=3; overrides go through --set section.key=value"),
    (("--config", "configs/digits.yaml", "--workdir"), "Missing value for flag --workdir; --help lists the flags"),
    (("--config", "configs/digits.yaml", "--work_dir", "w"), "Unknown command line flag 'work_dir'"),
])
def test_a_bad_command_line_is_one_line_with_status_2(capsys, args, says):
    with pytest.raises(SystemExit) as stopped:
        run_evaluate(*args)
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"hvdkeras: error: {says}")


def test_a_workdir_without_checkpoints_or_a_config_of_the_other_api_is_one_line(tmp_path, capsys):
    assert run_evaluate("--config", "configs/digits.yaml", "--workdir", str(tmp_path)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"hvdkeras: error: {tmp_path / 'checkpoints'} does not exist; pass the --workdir a training wrote"
    assert run_evaluate("--config", "configs/digits.yaml", "--set", "trainer.api=estimator", "--workdir",
                        str(tmp_path)) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("hvdkeras: error: python -m hvdkeras.evaluate evaluates the Keras path's checkpoints")


def test_its_flags_are_its_own():
    """--config, --set and --workdir are hvdkeras.train's names too: both import into one process."""
    from absl import flags

    import hvdkeras.train  # noqa: F401  (absl's FLAGS: train's)

    assert {"config", "workdir", "set"} <= set(evaluate.FLAGS)
    assert flags.FLAGS["config"].help != evaluate.FLAGS["config"].help

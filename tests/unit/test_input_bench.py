"""python -m hvdkeras.input_bench: absl flags of its own; every error a user can fix is one line on stderr, exit
status 2, no traceback, before TensorFlow loads. (The measurement itself runs under a launcher.)"""
import os
import subprocess
import sys

import pytest

from tests.unit.helpers import REPO, write_yaml


def run_bench(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "hvdkeras.input_bench", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def test_a_bad_config_is_one_line_status_2_and_no_traceback(tmp_path):
    path = write_yaml(tmp_path, "optimizer: {lr: 0.1}\n")
    proc = run_bench("--config", path)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"hvdkeras: error: unknown key 'optimizer.lr' in {path}")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, says", [
    ((), "--config is required, e.g. --config configs/cifar10_resnet56.yaml"),
    (("--config", "configs/digits.yaml", "--rounds", "0"), "--rounds and --batches must be at least 1; received: 0,"),
    (("--config", "configs/digits.yaml", "--rounds=many"), "flag --rounds=many: invalid literal for int()"),
    (("--config", "configs/digits.yaml", "--set"), "Missing value for flag --set"),
    (("--config", "configs/digits.yaml", "data.name=digits"), "unexpected arguments data.name=digits;"),
])
def test_a_bad_command_line_is_one_line_with_status_2(args, says):
    proc = run_bench(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"hvdkeras: error: {says}")


def test_its_flags_are_its_own():
    """--config and --set are hvdkeras.train's names too: both import into one process (the reference does)."""
    from absl import flags

    import hvdkeras.train  # noqa: F401  (absl's FLAGS: train's)
    from hvdkeras import input_bench

    assert set(input_bench.FLAGS) >= {"config", "set", "mock_examples", "rounds", "batches"}
    assert "mock_examples" not in flags.FLAGS

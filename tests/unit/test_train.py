"""python -m hvdkeras.train: every error a user can fix is one line on stderr, exit status 2, nothing written."""
import os
import subprocess
import sys

from tests.unit.helpers import REPO, write_yaml


def run_train(*args):
    return subprocess.run([sys.executable, "-m", "hvdkeras.train", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.strip()]


def test_cli_prints_one_line_and_no_traceback(tmp_path):
    path = write_yaml(tmp_path, "optimizer: {lr: 0.1}\n")
    proc = run_train("--config", path, "--workdir", str(tmp_path / "w"))
    assert proc.returncode == 2
    lines = error_lines(proc)
    assert lines == [lines[0]] and lines[0].startswith("hvdkeras: error: unknown key 'optimizer.lr'")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "w").exists()


def test_dry_run_flags_without_dry_run_are_refused(tmp_path):
    proc = run_train("--config", "configs/digits.yaml", "--np", "4", "--hosts", "a:4", "--workdir",
                     str(tmp_path / "w"))
    assert proc.returncode == 2
    assert error_lines(proc) == ["hvdkeras: error: --np, --hosts only apply with --dry_run (without it, a launcher"
                                 " starts the processes)"]
    assert not (tmp_path / "w").exists()


def test_config_is_required_and_overrides_go_through_set():
    proc = run_train()
    assert proc.returncode == 2 and error_lines(proc) == ["hvdkeras: error: --config is required, e.g. --config"
                                                          " configs/digits.yaml"]
    proc = run_train("--config", "configs/digits.yaml", "trainer.epochs=3")
    assert proc.returncode == 2 and error_lines(proc) == ["hvdkeras: error: unexpected arguments trainer.epochs=3;"
                                                          " overrides go through --set section.key=value"]

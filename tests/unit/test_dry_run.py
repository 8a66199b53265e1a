"""python -m hvdkeras.train --dry_run (hvdkeras.launch.cli): the plan and the launch command, nothing started."""
import os
import subprocess
import sys

from tests.unit.helpers import REPO


def test_train_dry_run_command_line(tmp_path):
    workdir = tmp_path / "wd"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-m", "hvdkeras.train", "--config", "configs/digits.yaml", "--dry_run", "--np", "8",
         "--hosts", "a:4,b:4", "--workdir", str(workdir)],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for line in ("world size        8 process(es) on 2 host(s): a:4,b:4",
                 "batch             global 64 = 8 ranks x 8 per rank",
                 "learning rate     0.1 = 0.05 x global batch 64 / optimizer.base_batch_size 32",
                 "horovod.compression=fp16 halves the gradient bytes",  # the ranks span two hosts
                 "steps per epoch   22",
                 "total steps       330 = 15 epochs x 22",
                 "horovod env       HOROVOD_STALL_CHECK_TIME_SECONDS=60",
                 f"horovodrun -np 8 -H a:4,b:4 --gloo python -m hvdkeras.train --config configs/digits.yaml"
                 f" --workdir {workdir}"):
        assert line in out, out
    assert not workdir.exists()  # no config.yaml, no checkpoints


def test_dry_run_mpirun_output_file_is_an_executable_script(tmp_path):
    out = tmp_path / "launch.sh"
    proc = subprocess.run(
        [sys.executable, "-m", "hvdkeras.train", "--config", "configs/digits.yaml", "--dry_run", "--np", "2",
         "--launcher", "mpirun", "--cores_per_host", "2", "--dry_run_output", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr
    script = out.read_text()
    assert script.startswith("#!/bin/bash\nset -euo pipefail\nmpirun -np 2 -H localhost:2 -bind-to none")
    assert os.access(out, os.X_OK) and f"--- written to {out} ---" in proc.stdout
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0


def test_a_dry_run_never_imports_your_own_pieces(tmp_path):
    (tmp_path / "own_pieces.py").write_text("raise SystemExit('own_pieces was imported')\n")
    (tmp_path / "c.yaml").write_text(
        'data: {name: "own_pieces:data", args: {rows: 10}}\nmodel: {name: "own_pieces:model"}\n'
        'trainer: {loss: "own_pieces:loss", metrics: ["own_pieces:metric"]}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "hvdkeras.train", "--config", str(tmp_path / "c.yaml"), "--dry_run", "--np", "2"],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("steps per epoch   unknown here, counted at start (your own data.name='own_pieces:data', not imported"
            " here; or set trainer.steps_per_epoch)") in proc.stdout, proc.stdout

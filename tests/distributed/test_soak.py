"""The short soak in the suite: faults in a row, one landing during the recovery from the last.

``python -m benchmarks.soak --short`` trains the digits job on two ranks under a restart loop (the way a requeue or
a retry wrapper runs it) and injects five faults 8-12 s apart, one of each kind a single host can have: a rank
SIGKILLed, the launcher SIGTERMed (a preemption), a rank frozen past Gloo's timeout, the disk full during a save
(a tmpfs of its own) and the newest checkpoint damaged. Seed 23's plan anchors three of them a few seconds after a
restart (a preemption 1.5 s in, a full disk 5 s in, a kill 8 s in), so they land in the start-up or the restore of
the attempt the previous fault caused. Its exit status says whether every promise held; this test reads its
report for what a user cares about: every fault survived, nothing lost beyond the promise (no batch for a
preemption, at most the batches since the last checkpoint otherwise), no hang, no checkpoint lost, no process
left, and the soaked job's final weights equal, bit for bit, a quiet run's with the same seed.

About 1.4 minutes, beside the session's quiet run of the same job (``soak_quiet_run``, 0.4 minutes, which the
Slurm soak shares); once per ``make test``: the faults and their recoveries are the trainer's coordination around
Horovod, the same code on both stacks, and each kind has its own test on each stack's path
(``test_faults_two_ranks.py``, ``test_preemption_two_ranks.py``). The link cut and the host leaving need the lab's
hosts and an elastic job; they are the soak of record's (docs/reliability.md).
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.harness.ranks import MPI_ENV, REPO
from tests.harness.stacks import once_per_make_test

pytestmark = once_per_make_test("the short soak (five faults in a row)", 1.4, stack="keras2")

SEED = 23  # every kind once; a preemption, a full disk and a kill anchored 1.5, 5 and 8 s after a restart
KINDS = {"kill_rank", "preempt", "freeze", "full_disk", "damage_checkpoint"}


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="the full-disk fault needs root and unshare(1) (a tmpfs in a private mount namespace)")
def test_five_faults_in_a_row_lose_nothing_beyond_the_promise_and_end_on_a_quiet_runs_weights(tmp_path,
                                                                                               soak_quiet_run):
    out = tmp_path / "soak"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.soak", "--short", "--seed", str(SEED), "--out", str(out),
                           "--quiet-from", str(soak_quiet_run)],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **MPI_ENV))
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    report = json.loads((out / "soak.json").read_text())
    assert report["faults"] == report["survived"] == 5 and report["not_injected"] == 0, tail
    assert set(report["by_kind"]) == KINDS, tail
    assert report["hangs"] == 0 and report["left_behind"] == [] and report["checkpoints_lost"] == [], tail
    assert report["unprompted_failures"] == [], tail
    for fault in report["per_fault"]:
        # a fault that came while the job was already ending (a rank had exited) has no loss of its own: None
        assert fault["held"] and (fault["lost"] or 0) <= (fault["allowed"] or 0), (fault, tail)
        if fault["kind"] == "preempt":
            assert fault["lost"] == 0, (fault, tail)
    assert any(fault["phase"] == "start-up" for fault in report["per_fault"]), tail  # a fault during a recovery
    final = report["final"]
    assert final["same_variables"] and final["trainable_max_abs_diff"] == 0.0, (final, tail)
    assert final["soaked_val_accuracy"] == final["quiet_val_accuracy"] >= 0.9, (final, tail)
    assert (out / "soak.txt").read_text().startswith("faults injected: 5; survived")

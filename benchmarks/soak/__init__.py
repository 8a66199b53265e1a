"""The soak: a training job under a restart loop, with a fault injected every 30-90 s, ending where a quiet run ends.

    python -m benchmarks.soak --faults 30 --epochs 600 --out runs/soak        # needs root for the full disk
    python -m benchmarks.soak --short                                        # 5 faults within 3 minutes
    python -m benchmarks.soak --elastic --short --no-quiet                   # an elastic job, 3 faults, ~4 minutes
    python -m benchmarks.soak --slurm --short                                # the sbatch script on the lab's Slurm
    python -m benchmarks.soak --short --quiet-only --out runs/quiet          # a quiet run for several soaks ...
    python -m benchmarks.soak --short --quiet-from runs/quiet                # ... of the same job

It runs the digits job (``horovodrun -np 2 -H localhost:2 --gloo python -m hvdkeras.train``, dropout off so
that the end can be compared bit for bit) and reruns the same command whenever it exits with a non-zero
status, as a Slurm requeue or a retry wrapper would, until it has trained all its epochs. Faults come at
random from a seed (:mod:`~benchmarks.soak.schedule`), some of them in the first seconds after a restart, while
the job starts and restores: a rank killed, the job preempted (SIGTERM), a rank frozen past the stall limit,
the disk full during a save (a tmpfs of its own, in a private mount namespace), the newest checkpoint damaged
(:mod:`~benchmarks.soak.faults`). Each attempt has a deadline: one that neither progresses nor exits within it
is a hang, killed and reported.

The report (``soak.txt`` and ``soak.json`` in ``--out``, :mod:`~benchmarks.soak.report`) gives per kind and per
fault the batches and the wall time lost against the promise (:mod:`~benchmarks.soak.accounting`), hangs,
processes left behind, failures no fault caused, and the final accuracy and weights against a quiet run of
the same seed (:mod:`~benchmarks.soak.weights`; ``--quiet-from`` takes an earlier one of the same job,
:mod:`~benchmarks.soak.quiet_run`). With the full-disk fault the soaked workdir lives on its own tmpfs,
which goes with the soak: a copy of it stays in ``--out/work``, with the attempts' logs in ``--out/logs``.

With ``--elastic`` the job is an elastic one (``horovodrun --min-np 1 --max-np 2`` with a host discovery script
over a hosts file in ``--out`` naming two "hosts" of this machine), and the faults are those an elastic job has a
promise for: a host leaving the hosts file for ``--leave`` seconds and coming back, a worker killed, the job
preempted (:mod:`~benchmarks.soak.schedule` says why these). The first two the job goes on through without a
restart, judged by :mod:`~benchmarks.soak.elastic` (the world shrinks, rolls back no further than the last commit,
and is whole again within ``--rejoin-limit`` seconds of the host being back); the end, trained partly on one rank,
is "not comparable" with a quiet run's bit for bit.

With ``--slurm`` the job is the sbatch script ``python -m hvdkeras.train --dry_run --launcher slurm`` writes,
submitted once to the lab's two-node Slurm (:mod:`lab.slurm`; needs root), and the restart loop is Slurm's
requeue (:mod:`~benchmarks.soak.slurm_job`): the script's own on the time limit's signal (the ``preempt`` fault
there), Slurm's on a node failure (``node_fail``), the soak's ``scontrol requeue`` after a failed run, as a user's
retry. Each run of the job is an attempt from the moment it is requeued, so a fault timed from a restart lands
while the job waits in the queue (``--requeue-hold`` s before the soak lifts Slurm's 120 s hold) or starts.
"""

"""Side-by-side throughput: the hvdkeras trainer versus what a user would otherwise run.

    python -m benchmarks --model applications.MobileNetV2 --batch 16 --np 2 --rounds 3
    make bench

Variants, run in alternating rounds (A B C ... A B C ...) on synthetic images so
that machine noise hits all of them alike; each job trains two epochs of
``--steps`` steps and only the second (warm) epoch is measured:

* ``hvdkeras``: ``python -m hvdkeras.train`` on a synthetic config, with its defaults;
* ``hvdkeras-lean``: the same without the per-batch NaN agreement
  (``trainer.terminate_on_nan=false``: ``TerminateOnNaN``'s allreduce), to price it;
* ``horovod``: Horovod's published Keras recipe (init, scale the rate,
  ``DistributedOptimizer``, broadcast and metric-average callbacks) with Horovod's
  and TensorFlow's default settings (on Keras 3, where Horovod 0.28.1's Keras layer
  does not run, the same recipe on Horovod's TensorFlow ops with
  ``hvdkeras.DistributedOptimizer``);
* ``horovod-tuned``: the same recipe with hvdkeras' host settings (Horovod's
  variables, among them the idle wait, threads per rank, CPU binding): the difference
  to ``hvdkeras`` is the framework's own cost;
* ``mwms``: ``tf.distribute.MultiWorkerMirroredStrategy`` with the same number of
  processes, model and per-process batch (``model.fit``; on Keras 3, whose ``fit``
  fails under this strategy, TensorFlow's custom training loop for it);
* ``ceiling``: the communication-free ceiling, the same processes, model, batch,
  threads, CPU binding and Horovod variables with the gradient exchange removed;
* ``ceiling-lockstep``: the ceiling whose ranks allreduce one number after every batch, so
  that each step waits for the slower rank as in training, with no gradient moved: between
  it and ``hvdkeras-lean`` lies the cost of the gradients' bytes, between it and the
  ceiling the cost of the lockstep;
* ``hvdkeras+<key>=<value>[+...]``: the trainer with config overrides, e.g.
  ``hvdkeras+horovod.groups=1`` (``hvdkeras-grouped``) or ``hvdkeras+horovod.compression=fp16``.

**The lab** (``--hosts 2 --link unlimited,1gbit,gpu``, as root): the same jobs with one
process on each of two emulated hosts (network namespaces with their own cores and
sshd) whose links are shaped to each rate in turn (:mod:`lab`). It
reports, per rate and row, images/s with its spread, scaling efficiency against the
ceiling of the same round, and the step split into compute and exposed
communication; writes ``lab.json``, ``lab_efficiency.png`` and ``projection.png``
(:mod:`benchmarks.efficiency`: the arithmetic, the GPU-equivalent rate and the
projection to larger clusters).

It prints a table (median images/s total and per rank, min-max spread over
rounds, peak memory per rank, ratios to hvdkeras), writes it as JSON and draws a
PNG bar chart into ``--out``. ``--np 1,2`` adds a scaling sweep: scaling
efficiency ``throughput(np) / (np * throughput(1))`` per variant and a line chart.

Modules: :mod:`~benchmarks.runner` starts the jobs (one variant on ``np``
processes) and reads their throughput; :mod:`~benchmarks.summary` turns the
rounds into the table, its text and the charts; ``benchmarks/recipes/`` holds
the plain programs of the ``horovod*`` and ``mwms`` variants, run by path;
:mod:`~hvdkeras.input_bench` is the other benchmark, input pipeline
versus training step (``python -m hvdkeras.input_bench``).
"""

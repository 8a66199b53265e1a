"""The plain programs the benchmark compares hvdkeras with: what a user writes without it.

Each is run by path, ``python benchmarks/recipes/<recipe>.py MODEL BATCH IMAGE_SIZE STEPS``
(under ``horovodrun`` for the Horovod ones, one process per worker with ``TF_CONFIG``
for the MultiWorkerMirroredStrategy ones), imports its sibling :mod:`common` (Python
puts a script's folder first on ``sys.path``), trains two epochs of ``STEPS`` steps on
synthetic images and prints ``RESULT <json>`` per process for the second epoch:

* ``horovod_keras.py``: Horovod's published Keras recipe (Keras 2);
* ``horovod_ops.py``: the same recipe on Horovod's TensorFlow ops with
  ``hvdkeras.DistributedOptimizer`` (Keras 3, where Horovod's Keras layer does not run);
* ``mwms_fit.py``: ``model.fit`` under ``tf.distribute.MultiWorkerMirroredStrategy`` (Keras 2);
* ``mwms_loop.py``: TensorFlow's custom training loop for that strategy (Keras 3, whose
  ``fit`` fails under it);
* ``ceiling.py``: the communication-free ceiling (the same processes and threads as
  hvdkeras, no gradient exchange).

None imports hvdkeras but ``horovod_ops.py``, for its ``DistributedOptimizer``, and ``ceiling.py``,
for hvdkeras' thread budget.
"""

"""Run under horovodrun: hvdkeras.tf_estimator.HorovodEstimator with a classic model_fn on two ranks.

    python estimator_check.py MODEL_DIR MAX_STEPS [keras]
    python estimator_check.py MODEL_DIR:MAX_STEPS[:keras] [MODEL_DIR:MAX_STEPS[:keras] ...]

The second form runs each Estimator in turn in these two processes (one job start for all of them).
Prints `RESULT <json>` per rank and run (its index as ``run``): the global step each rank started from (after the
broadcast) and reached, the evaluation on uneven shards (7 and 5 of 12 examples)
next to the accuracy computed in NumPy from the trained variables over all 12,
and a fingerprint of the variables.
"""
import atexit
import gc
import json
import sys

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import numpy as np
import tensorflow as tf

from hvdkeras import tf_estimator as hvd_estimator
from hvdkeras.runtime import distributed

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

v1 = tf.compat.v1
rng = np.random.RandomState(0)
X = rng.randn(400, 5).astype("float32")
Y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype("int32") + (X[:, 2] > 1).astype("int32")
XV, YV = X[:12] + 0.3, Y[:12]


def train_input_fn(input_context):
    ds = tf.data.Dataset.from_tensor_slices((X, Y))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.shuffle(400, seed=1).repeat().batch(10)


def eval_input_fn(input_context):
    part = slice(0, 7) if input_context.input_pipeline_id == 0 else slice(7, 12)  # uneven on purpose
    return tf.data.Dataset.from_tensor_slices((XV[part], YV[part])).batch(3)


def model_fn(features, labels, mode, params):
    logits = v1.layers.dense(features, 3, name="linear")
    predictions = tf.argmax(logits, axis=-1)
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss,
                                          eval_metric_ops={"accuracy": v1.metrics.accuracy(labels, predictions)})
    optimizer = hvd_estimator.distributed_optimizer(v1.train.MomentumOptimizer(params["learning_rate"], 0.9))
    return tf.estimator.EstimatorSpec(mode, loss=loss,
                                      train_op=optimizer.minimize(loss, global_step=v1.train.get_global_step()))


class FirstStep(v1.train.SessionRunHook):
    def begin(self):
        self.step_tensor = v1.train.get_global_step()
        self.first = None

    def after_create_session(self, session, coord):
        self.first = int(session.run(self.step_tensor))


def run(index, model_dir, max_steps, keras_path):
    first = FirstStep()
    train_fn, eval_fn = train_input_fn, eval_input_fn
    if keras_path:  # a compiled Keras model turned into an Estimator with the distributed optimizer
        import horovod.tensorflow.keras as hvd_keras

        hvd_keras.init()
        model = tf.keras.Sequential([tf.keras.Input((5,), name="x"), tf.keras.layers.Dense(3, name="linear")])
        sgd = tf.keras.optimizers.legacy.SGD(0.05 * hvd_keras.size(), momentum=0.9)
        loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(hvd_keras.DistributedOptimizer(sgd), loss, metrics=["accuracy"])
        est = hvd_estimator.keras_estimator(model, model_dir=model_dir, scaled_learning_rate=0.05 * hvd_keras.size(),
                                            save_checkpoints_steps=10)
        as_dict = lambda fn: lambda input_context: fn(input_context).map(lambda x, y: ({"x": x}, y))  # noqa: E731
        train_fn, eval_fn = as_dict(train_input_fn), as_dict(eval_input_fn)
    else:
        est = hvd_estimator.HorovodEstimator(model_fn, model_dir=model_dir, learning_rate=0.05,
                                             save_checkpoints_steps=10)
    est.train(train_fn, max_steps=max_steps // est.size, hooks=[first])  # Horovod's steps // ranks
    results = est.evaluate(eval_fn)
    variables = est.variables()
    prefix = "layer_with_weights-0/{}/.ATTRIBUTES/VARIABLE_VALUE" if keras_path else "linear/{}"
    kernel, bias = variables[prefix.format("kernel")], variables[prefix.format("bias")]
    expected = float(np.mean(np.argmax(XV @ kernel + bias, axis=-1) == YV))
    print("RESULT " + json.dumps({
        "rank": est.rank, "run": index, "first_step": first.first, "global_step": int(results["global_step"]),
        "accuracy": float(results["accuracy"]), "expected_accuracy": expected, "own_model_dir": est.own_model_dir,
        "lr": est.learning_rate, "weights": distributed.fingerprint([variables[k] for k in sorted(variables)]),
    }), flush=True)


if len(sys.argv) > 2 and ":" not in sys.argv[1]:  # MODEL_DIR MAX_STEPS [keras]
    runs = [[sys.argv[1], sys.argv[2], *sys.argv[3:4]]]
else:
    runs = [arg.split(":") for arg in sys.argv[1:]]
for i, (model_dir, max_steps, *mode) in enumerate(runs):
    run(i, model_dir, int(max_steps), mode == ["keras"])

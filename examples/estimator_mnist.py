"""A classic tf.estimator model_fn made Horovod-distributed with hvdkeras.tf_estimator.

Lines that differ from the single-process script end with ``# HVD``. MNIST comes
from TensorFlow Datasets (prepare it with `tfds build mnist`); ``--mock_examples N``
serves random MNIST-shaped data instead, for a machine without the dataset.

    horovodrun -np 2 -H localhost:2 --gloo python examples/estimator_mnist.py --model_dir /tmp/est_mnist
"""
import argparse
import contextlib

import tensorflow as tf
import tensorflow_datasets as tfds

from hvdkeras import tf_estimator as hvd_estimator  # HVD

v1 = tf.compat.v1
parser = argparse.ArgumentParser()
parser.add_argument("--model_dir", required=True)
parser.add_argument("--steps", type=int, default=400, help="single-process steps (each rank runs steps / ranks)")
parser.add_argument("--mock_examples", type=int, default=0)
args = parser.parse_args()


def input_fn(split, training, input_context=None):  # HVD: input_context tells the rank's shard
    split = tfds.even_splits(split, n=input_context.num_input_pipelines)[input_context.input_pipeline_id]  # HVD
    ds = tfds.load("mnist", split=split, as_supervised=True)
    ds = ds.map(lambda image, label: (tf.cast(image, tf.float32) / 255.0, label))
    if training:
        ds = ds.shuffle(10000, seed=1).repeat()
    return ds.batch(64)


def model_fn(features, labels, mode, params):
    x = v1.layers.flatten(features)
    x = v1.layers.dense(x, 128, activation=tf.nn.relu)
    logits = v1.layers.dense(x, 10)
    predictions = tf.argmax(logits, axis=-1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"class": predictions})
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss,
                                          eval_metric_ops={"accuracy": v1.metrics.accuracy(labels, predictions)})
    optimizer = v1.train.MomentumOptimizer(params["learning_rate"], momentum=0.9)  # HVD: already scaled
    optimizer = hvd_estimator.distributed_optimizer(optimizer)  # HVD: gradients averaged over ranks
    train_op = optimizer.minimize(loss, global_step=v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


mock = tfds.testing.mock_data(num_examples=args.mock_examples) if args.mock_examples else contextlib.nullcontext()
with mock:
    estimator = hvd_estimator.HorovodEstimator(model_fn, model_dir=args.model_dir, learning_rate=0.01)  # HVD
    # HVD: as Horovod's example, a single-process step count divided by the ranks
    estimator.train(lambda input_context: input_fn("train", True, input_context),
                    max_steps=args.steps // estimator.size)
    results = estimator.evaluate(lambda input_context: input_fn("test", False, input_context))
if estimator.rank == 0:  # HVD: print once
    print(f"global_step={results['global_step']} accuracy={results['accuracy']:.4f}")

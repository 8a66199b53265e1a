"""TensorFlow's custom-loop recipe for ``tf.distribute.MultiWorkerMirroredStrategy`` (``strategy.run`` per step).

The same training as ``mwms_fit.py`` where Keras' ``model.fit`` fails under this strategy
(Keras 3.15, keras-team/keras#20585). Started the same way, one process per worker
with ``TF_CONFIG``.
"""
import json
import os

import tensorflow as tf
from common import Clock, batch, data, make_model, report, steps

strategy = tf.distribute.MultiWorkerMirroredStrategy()
workers = strategy.num_replicas_in_sync
with strategy.scope():
    model = make_model()
    opt = tf.keras.optimizers.SGD(0.01 * workers, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(reduction="none")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
global_data = data().unbatch().batch(batch * workers).with_options(options)
batches = iter(strategy.experimental_distribute_dataset(global_data))


def replica_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=batch * workers)
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def train_step():
    x, y = next(batches)
    return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)


clock = Clock()
for epoch in range(2):
    clock.on_epoch_begin(epoch)
    for _ in range(steps):
        loss = train_step()
    float(loss)  # waits for the last step
    clock.on_epoch_end(epoch)
report(json.loads(os.environ["TF_CONFIG"])["task"]["index"], clock, batch * workers)

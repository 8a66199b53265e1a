"""A model with two inputs and two outputs in the config path: will a visitor buy, and for how much?

    horovodrun -np 2 -H localhost:2 python -m hvdkeras.train \
        --config examples/own_model_and_data/shop.yaml --workdir runs/shop

``shop.yaml`` names ``shop_task:data`` and ``shop_task:model``, and gives each output its loss, its
weight and its metrics by the output's name (``buy``, ``price``). The module needs nothing of
hvdkeras: the same functions serve a plain ``model.fit``.

* ``data`` returns ``(features, labels, sample_weight)`` triples: the features a mapping by input
  name, the labels a mapping by output name, and a weight per example (recent visits count more).
  hvdkeras keeps all three through the sharding, shuffling and batching.
* ``model`` returns a functional model whose output layers are named as the outputs it returns;
  Keras 2 names the logged metrics by the layers, Keras 3 by the keys (``buy_loss``,
  ``val_price_mae``...): the same names on both stacks.
"""
import numpy as np
import tensorflow as tf

keras = tf.keras  # Keras 2 on TensorFlow 2.15, Keras 3 from TensorFlow 2.16 on


def arrays(n, seed, items=4, visitor=3):
    """``n`` visits as numpy arrays: ``({"basket", "visitor"}, {"buy", "price"}, weight)``."""
    rng = np.random.RandomState(seed)
    truth = np.random.RandomState(1234)  # the same rule for every split
    w_buy, w_price = truth.normal(size=items + visitor), truth.uniform(1, 3, size=items)
    basket = rng.normal(size=(n, items)).astype(np.float32)
    person = rng.normal(size=(n, visitor)).astype(np.float32)
    buy = (np.concatenate([basket, person], 1) @ w_buy > 0).astype(np.float32)[:, None]
    price = (basket @ w_price + 0.1 * rng.normal(size=n)).astype(np.float32)[:, None]
    weight = rng.uniform(0.5, 1.5, size=n).astype(np.float32)
    return {"basket": basket, "visitor": person}, {"buy": buy, "price": price}, weight


def data(train_examples=1024, validation_examples=256):
    """``(train, validation)``: unbatched ``tf.data.Dataset``s of ``(features, labels, sample_weight)``."""
    return (tf.data.Dataset.from_tensor_slices(arrays(train_examples, seed=0)),
            tf.data.Dataset.from_tensor_slices(arrays(validation_examples, seed=1)))


def model(hidden=16, items=4, visitor=3):
    """Two named inputs, one shared hidden layer, two named outputs: a probability and an amount."""
    basket = keras.Input((items,), name="basket")
    person = keras.Input((visitor,), name="visitor")
    hidden = keras.layers.Dense(hidden, activation="relu")(keras.layers.Concatenate()([basket, person]))
    buy = keras.layers.Dense(1, activation="sigmoid", name="buy")(hidden)
    price = keras.layers.Dense(1, name="price")(hidden)
    return keras.Model({"basket": basket, "visitor": person}, {"buy": buy, "price": price})

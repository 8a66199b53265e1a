"""hvdkeras.training.data: sharding, batches, order and validation of each rank's data (the batch formulas:
test_scaling)."""
import concurrent.futures
import hashlib
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from hvdkeras import config as config_lib
from hvdkeras.common.data_sizes import BUILT_IN, DIGITS_FILE
from hvdkeras.common.errors import ConfigError
from hvdkeras.common.scaling import for_world
from hvdkeras.training import data
from tests.unit.helpers import REPO


def epochs_of(ds, steps):
    batches = [(x.numpy(), y.numpy()) for x, y in ds]
    return [batches[i:i + steps] for i in range(0, len(batches), steps)]


def digits_cfg(**over):
    return config_lib.load(None, [f"data.{k}={v}" for k, v in over.items()]).data


def test_shards_are_disjoint_and_cover_everything():
    for n, size in [(10, 3), (1437, 2), (7, 7), (5, 8)]:
        shards = [set(data.shard_indices(n, data.Shard(r, size))) for r in range(size)]
        assert set().union(*shards) == set(range(n))
        assert sum(len(s) for s in shards) == n


def test_the_built_in_names_are_registered_whichever_module_of_the_package_is_imported_first():
    # contract.py holds the registry and builtin.py registers in it: the package imports both either way
    code = ("from hvdkeras.training.data import contract\n"
            "from hvdkeras.common.data_sizes import BUILT_IN\n"
            "assert sorted(contract.names()) == sorted(BUILT_IN), contract.names()\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(data.names()) == sorted(BUILT_IN)

def test_digits_per_rank_batches_and_shapes():
    cfg = digits_cfg(global_batch_size=64)
    ds = data.build(cfg, data.Shard(1, 2), seed=1)
    assert ds.per_rank_batch == 32 and ds.steps_per_epoch == 22
    assert ds.input_shape == (8, 8, 1) and ds.num_classes == 10
    epochs = epochs_of(ds.train(0, 2), ds.steps_per_epoch)
    assert len(epochs) == 2 and all(len(e) == 22 for e in epochs)
    x, y = epochs[0][0]
    assert x.shape == (32, 8, 8, 1) and y.shape == (32,) and 0 <= x.min() and x.max() <= 1


def test_ranks_never_see_the_same_training_example():
    cfg = digits_cfg(global_batch_size=64)
    seen = []
    for r in range(2):
        ds = data.build(cfg, data.Shard(r, 2), seed=1)
        xs = np.concatenate([x for x, _ in ds.train(0, 1).as_numpy_iterator()])
        seen.append({row.tobytes() for row in xs.reshape(len(xs), -1)})
    # a handful of digits images are byte-identical duplicates in the source data itself
    assert len(seen[0]) > 600 and len(seen[1]) > 600
    assert len(seen[0] & seen[1]) <= 5


@pytest.mark.parametrize("ranks", [2, 4])
def test_digits_global_batches_are_the_same_on_any_number_of_ranks(ranks):
    """Step t on N ranks sees exactly the examples of step t on one rank, split in rank order."""
    cfg = digits_cfg(global_batch_size=64)
    one = epochs_of(data.build(cfg, data.Shard(0, 1), seed=7).train(1, 2), 22)[0]
    split = [epochs_of(data.build(cfg, data.Shard(r, ranks), seed=7).train(1, 2), 22)[0] for r in range(ranks)]
    for step in range(22):
        x = np.concatenate([split[r][step][0] for r in range(ranks)])
        y = np.concatenate([split[r][step][1] for r in range(ranks)])
        assert np.array_equal(x, one[step][0]) and np.array_equal(y, one[step][1])


def test_per_rank_batch_size_makes_the_global_batch_grow_with_the_ranks():
    cfg = config_lib.load(None, ["data.per_rank_batch_size=16"]).data
    assert cfg.global_batch_size is None
    for ranks, steps in [(1, 1438 // 16), (2, 1438 // 32), (4, 1438 // 64)]:
        ds = data.build(cfg, data.Shard(0, ranks), seed=0)
        assert (ds.per_rank_batch, ds.steps_per_epoch) == (16, steps)


def test_order_differs_per_epoch_and_is_reproducible():
    cfg = digits_cfg(global_batch_size=64)
    a = epochs_of(data.build(cfg, data.Shard(0, 2), seed=3).train(0, 3), 22)
    b = epochs_of(data.build(cfg, data.Shard(0, 2), seed=3).train(0, 3), 22)
    c = epochs_of(data.build(cfg, data.Shard(0, 2), seed=4).train(0, 1), 22)
    assert all(np.array_equal(a[e][0][1], b[e][0][1]) for e in range(3))
    assert not np.array_equal(a[0][0][0], a[1][0][0])
    assert not np.array_equal(a[0][0][0], c[0][0][0])


def test_resumed_stream_equals_uninterrupted_one():
    cfg = digits_cfg(global_batch_size=64)
    full = epochs_of(data.build(cfg, data.Shard(1, 2), seed=5).train(0, 4), 22)
    resumed = epochs_of(data.build(cfg, data.Shard(1, 2), seed=5).train(2, 4), 22)
    for e in range(2):
        for (x1, y1), (x2, y2) in zip(full[2 + e], resumed[e]):
            assert np.array_equal(x1, x2) and np.array_equal(y1, y2)


def test_validation_counts_every_example_once():
    cfg = digits_cfg(global_batch_size=63, eval_global_batch_size=15)
    total = 0
    for r in range(3):
        ds = data.build(cfg, data.Shard(r, 3), seed=0)
        n = sum(len(y) for _, y in ds.validation.as_numpy_iterator())
        assert n == ds.validation_examples
        total += n
    assert total == round(1797 * 0.2)


def test_bad_sizes_are_config_errors():
    with pytest.raises(ConfigError, match="larger than the 1438 training examples"):
        data.build(digits_cfg(global_batch_size=4096), data.Shard(0, 1), seed=0)
    with pytest.raises(ConfigError, match="lower trainer.steps_per_epoch or the global batch"):
        data.build(digits_cfg(global_batch_size=64), data.Shard(0, 2), seed=0, steps=100)


def test_synthetic():
    cfg = config_lib.load(None, ["data.name=synthetic", "data.image_shape=[16,16,3]", "data.num_classes=5",
                                 "data.global_batch_size=8", "data.train_examples=40", "data.eval_examples=9"]).data
    ds = data.build(cfg, data.Shard(1, 2), seed=0)
    assert ds.steps_per_epoch == 5 and ds.per_rank_batch == 4
    batches = list(ds.train(1, 3).as_numpy_iterator())
    assert len(batches) == 10 and batches[0][0].shape == (4, 16, 16, 3) and batches[0][1].max() < 5
    assert ds.validation_examples == 4  # examples 1, 3, 5, 7 of 9
    with pytest.raises(ConfigError, match="fewer than the 2 ranks"):
        data.build(config_lib.load(None, ["data.name=synthetic", "data.eval_examples=1"]).data, data.Shard(0, 2), 0)


def test_unknown_dataset_name_is_a_config_error():
    with pytest.raises(ConfigError, match=r"data.name='imagenet' is neither a built-in dataset \(digits, synthetic\)"
                                          r" nor a TensorFlow Datasets name"):
        data.build(config_lib.load(None, ["data.name=imagenet"]).data, data.Shard(0, 1), seed=0)


def test_tf_data_options_come_from_the_config():
    cfg = config_lib.load(None, ["data.deterministic=false", "data.autotune=false"]).data
    ds = data.build(cfg, data.Shard(0, 1), seed=0, threads=3)
    options = ds.train(0, 1).options()
    assert options.deterministic is False and options.autotune.enabled is False
    assert options.threading.private_threadpool_size == 3
    cfg = config_lib.load(None, ["data.private_threadpool_size=5"]).data
    validation = data.build(cfg, data.Shard(0, 1), seed=0, threads=3).validation
    assert validation.options().threading.private_threadpool_size == 5


def _seconds_to_end(ds, consume_s, step_s=0.25):
    """Reads ``ds`` with a slow consumer (a training step's pace) for ``consume_s``, then drops the iterator:
    the seconds its destruction took."""
    it = iter(ds)
    end = time.monotonic() + consume_s
    while time.monotonic() < end:
        next(it)
        time.sleep(step_s)
    start = time.monotonic()
    del it
    return time.monotonic() - start


def test_an_iterator_of_the_default_pipeline_ends_at_once_after_a_long_read():
    """tf.data's autotuner (``data.autotune=true``) holds an iterator's end until its next optimization
    time, now and then (seen on TensorFlow 2.15, 2.16, 2.17, 2.20 and 2.21; on 2.15, 1 in 8 iterators dropped
    after 6.5 s waited 3.4 s, and after 12-21 s about 1 in 2 waited 4-20 s, up to the 60 s period): the end of
    `fit` and of every
    validation pass. Twelve iterators at once, so a regression shows with a probability of about 0.8."""
    cfg = config_lib.load(None, ["data.name=synthetic", "data.image_shape=[8,8,3]", "data.global_batch_size=2",
                                 "data.train_examples=4000"]).data
    train = data.build(cfg, data.Shard(0, 1), seed=0).train(0, 1)
    assert train.options().autotune.enabled is False
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        ends = list(pool.map(lambda _: _seconds_to_end(train, 6.5), range(12)))
    assert max(ends) < 1.5, f"iterators took {sorted(ends)} s to end"


def test_a_tfds_dataset_not_prepared_is_named_without_looking_online_or_leaving_a_temp_folder(tmp_path, monkeypatch):
    """TFDS looks a dataset that is not prepared up in Google's bucket (seconds of retries without internet, where its
    bucket is on) from a temp folder it leaves behind; hvdkeras' builder does neither, and TFDS' own still does."""
    tfds = pytest.importorskip("tensorflow_datasets")
    from tensorflow_datasets.core.utils import gcs_utils

    looked = []
    monkeypatch.setattr(gcs_utils, "exists", lambda path: looked.append(str(path)) or False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    cfg = config_lib.load(None, ["data.name=mnist", f"data.data_dir={tmp_path / 'tfds'}"]).data
    builder = data.tfds_builder(cfg)
    assert builder.name == "mnist" and looked == [] and os.listdir(tmp_path / "tmp") == []
    assert str(data.not_prepared_error(builder, cfg)).startswith(f"mnist is not prepared in {tmp_path / 'tfds'}")
    tfds.builder("mnist", data_dir=str(tmp_path / "tfds"))  # what the test would see of a look-up
    assert len(os.listdir(tmp_path / "tmp")) == 1 and (looked or gcs_utils._is_gcs_disabled)


def test_the_shipped_digits_are_scikit_learns_file_and_read_as_load_digits_gives_them():
    # The file is scikit-learn's digits.csv.gz byte for byte (hvdkeras/resources/README.md).
    with open(DIGITS_FILE, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == (
            "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22")
    pixels, labels = data.digits_arrays()
    assert pixels.shape == (1797, 64) and labels.shape == (1797,)
    assert pixels.min() == 0 and pixels.max() == 16 and np.all(pixels == np.round(pixels))
    # load_digits()'s first image and its class counts
    assert pixels[0].reshape(8, 8)[1].tolist() == [0, 0, 13, 15, 10, 15, 5, 0]
    assert np.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def _own(n_train=100, n_val=11):
    import tensorflow as tf

    x = np.arange(n_train, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    val = np.arange(1000, 1000 + n_val, dtype=np.float32)[:, None]
    return lambda: (tf.data.Dataset.from_tensor_slices((x, np.arange(n_train))),
                    tf.data.Dataset.from_tensor_slices((val, np.arange(n_val))))


@pytest.fixture
def global_seed_0():
    """TensorFlow's global seed at 0 (``runtime.seed: 0``), whose seed check once failed on a tensor op seed."""
    import tensorflow as tf

    tf.random.set_seed(0)
    yield
    tf.random.set_seed(None)


def test_your_own_data_is_sharded_shuffled_per_epoch_and_validated_once_over_ranks(global_seed_0):
    cfg = config_lib.load(None, ["data.name=own:data", "data.global_batch_size=8", "data.shuffle_buffer=100"]).data
    parts = [data.from_function(_own(), for_world(cfg, 2),
                                data.Shard(r, 2), seed=3, steps=None) for r in range(2)]
    assert [p.steps_per_epoch for p in parts] == [(100 // 2) // 4] * 2  # the smaller part decides, as for TFDS
    assert parts[0].input_shape == (3,) and parts[0].per_rank_batch == 4
    seen = []
    for rank, part in enumerate(parts):
        epochs = epochs_of(part.train(0, 2), part.steps_per_epoch)
        labels = [np.concatenate([y for _, y in epoch]) for epoch in epochs]
        assert all(int(v) % 2 == rank for v in np.concatenate(labels))  # rank r: examples r, r + 2, ...
        assert list(labels[0]) != list(labels[1])  # reshuffled per epoch
        again = epochs_of(part.train(1, 2), part.steps_per_epoch)[0]  # a resumed epoch is the same epoch
        assert list(np.concatenate([y for _, y in again])) == list(labels[1])
        seen.append(labels[0])
    assert not set(seen[0]) & set(seen[1])
    val = [np.concatenate([y for _, y in part.validation]) for part in parts]
    assert sorted(np.concatenate(val)) == list(range(11))  # every validation example once, 6 + 5
    assert [p.validation_examples for p in parts] == [6, 5]


def test_your_own_data_that_is_too_small_for_the_global_batch_is_one_line():
    cfg = config_lib.load(None, ["data.name=own:data", "data.global_batch_size=64"]).data
    with pytest.raises(ConfigError, match=r"^data.global_batch_size=64 is larger than the 40 training examples of"
                                          r" own:data on 2 ranks; use a smaller global batch$"):
        data.from_function(_own(n_train=40), for_world(cfg, 2), data.Shard(0, 2), seed=1, steps=None)


def test_your_own_features_and_labels_by_name_and_sample_weights_stay_together_through_shards_and_batches():
    import tensorflow as tf

    n, n_val = 40, 7
    index = np.arange(n + n_val, dtype=np.float32)

    def triples(part):  # features and labels by name, each example's weight 1000 + its index
        i = index[part]
        return tf.data.Dataset.from_tensor_slices(({"a": i[:, None], "b": -i}, {"buy": i, "price": 2 * i}, 1000 + i))

    own = lambda: (triples(slice(0, n)), triples(slice(n, n + n_val)))  # noqa: E731
    cfg = config_lib.load(None, ["data.name=own:data", "data.global_batch_size=8"]).data
    parts = [data.from_function(own, for_world(cfg, 2), data.Shard(r, 2), seed=3, steps=None) for r in range(2)]
    assert len(parts[0].element_spec) == 3 and set(parts[0].element_spec[1]) == {"buy", "price"}
    seen = []
    for rank, part in enumerate(parts):
        for x, y, w in part.train(0, 1):
            i = x["a"].numpy()[:, 0]
            assert len(i) == 4 and all(int(v) % 2 == rank for v in i)  # rank r: examples r, r + 2, ...
            for got in (-x["b"], y["buy"], y["price"] / 2, w - 1000):  # still one example's parts, shuffled together
                assert np.array_equal(got.numpy(), i)
            seen.extend(i)
        val = list(part.validation)
        assert all(np.array_equal(w.numpy() - 1000, y["buy"].numpy()) for _, y, w in val)
    assert len(seen) == len(set(seen)) == 2 * parts[0].steps_per_epoch * 4
    assert [p.validation_examples for p in parts] == [4, 3]

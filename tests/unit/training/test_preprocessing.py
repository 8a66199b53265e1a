"""hvdkeras.training.preprocessing: per-example image transforms and the pipeline chosen by dataset name."""
import numpy as np
import tensorflow as tf

from hvdkeras.training import preprocessing


def jpeg(h, w, seed=0):
    rng = np.random.RandomState(seed)
    return tf.io.encode_jpeg(rng.randint(0, 256, (h, w, 3)).astype(np.uint8))


def test_imagenet_train_crop_is_seeded_and_sized():
    image = jpeg(300, 400)
    a = preprocessing.imagenet_train(image, tf.constant([1, 2], tf.int64))
    b = preprocessing.imagenet_train(image, tf.constant([1, 2], tf.int64))
    c = preprocessing.imagenet_train(image, tf.constant([1, 3], tf.int64))
    assert a.shape == (224, 224, 3) and a.dtype == tf.float32
    assert np.array_equal(a.numpy(), b.numpy()) and not np.array_equal(a.numpy(), c.numpy())
    png = tf.io.encode_png(np.zeros((50, 60, 3), np.uint8))  # non-JPEG input takes the decode-then-crop path
    assert preprocessing.imagenet_train(png, tf.constant([0, 0], tf.int64), size=32).shape == (32, 32, 3)


def test_imagenet_eval_resizes_short_side_to_256_then_center_crops():
    flat = tf.io.encode_png(np.full((300, 600, 3), 128, np.uint8))
    out = preprocessing.imagenet_eval(flat)
    assert out.shape == (224, 224, 3)
    np.testing.assert_allclose(out.numpy()[0, 0], (128 - np.array(preprocessing.IMAGENET_MEAN))
                               / np.array(preprocessing.IMAGENET_STD), rtol=1e-5)
    # a marker in the exact center survives the center crop
    img = np.zeros((256, 512, 3), np.uint8)
    img[126:130, 254:258] = 255
    out = preprocessing.imagenet_eval(tf.io.encode_png(img)).numpy()
    assert out[110:114, 110:114].mean() > out[0:4, 0:4].mean() + 1


def test_cifar_train_pads_crops_flips():
    image = tf.constant(np.random.RandomState(0).randint(0, 256, (32, 32, 3)).astype(np.uint8))
    outs = [preprocessing.cifar_train(image, tf.constant([7, i], tf.int64)).numpy() for i in range(8)]
    assert all(o.shape == (32, 32, 3) for o in outs)
    assert len({o.tobytes() for o in outs}) > 1  # different crops / flips per seed
    zero = np.array(-np.array(preprocessing.CIFAR_MEAN) / np.array(preprocessing.CIFAR_STD), np.float32)
    assert any(np.allclose(o[0, 0], zero) or np.allclose(o[-1, -1], zero) for o in outs)  # padding shows


def test_auto_pipelines():
    assert preprocessing.AUTO["imagenet2012"] == "imagenet" and preprocessing.AUTO["cifar10"] == "cifar"
    assert set(preprocessing.pipelines(224)) == {"imagenet", "cifar", "mnist"}

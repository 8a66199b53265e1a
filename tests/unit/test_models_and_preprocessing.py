"""Model definitions and per-example image transforms."""
import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import config as config_lib
from hvdkeras import models, preprocessing


def model_cfg(**kw):
    return config_lib.load(None, [f"model.{k}={v}" for k, v in kw.items()]).model


def trainable(model):
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))


def test_resnet50_is_v1_5_with_the_reference_size():
    model = models.build((224, 224, 3), 1000, model_cfg(name="resnet50"))
    assert trainable(model) == 25_557_032  # exactly torchvision's resnet50 (v1.5) parameter count
    # v1.5: the first block of stage 2 strides on its 3x3 convolution, not on the 1x1
    assert model.get_layer("stage2_block1_1").strides == (1, 1)
    assert model.get_layer("stage2_block1_2").strides == (2, 2)
    assert model.output_shape == (None, 1000)
    # zero-init of the last batch norm in each block; the others start at one
    assert not model.get_layer("stage1_block1_3_bn").gamma.numpy().any()
    assert model.get_layer("stage1_block1_1_bn").gamma.numpy().all()


def test_cifar_resnets():
    model = models.build((32, 32, 3), 10, model_cfg(name="resnet56"))
    assert trainable(model) == pytest.approx(850_000, rel=0.01)  # He et al.: 0.85M
    convs = [l for l in model.layers if isinstance(l, tf.keras.layers.Conv2D)]
    assert len(convs) + 1 == 56  # 55 convolutions and the classifier
    out = model(tf.zeros((2, 32, 32, 3)))
    assert out.shape == (2, 10)
    assert trainable(models.build((32, 32, 3), 10, model_cfg(name="resnet20"))) == pytest.approx(270_000, rel=0.01)


def test_weight_decay_on_kernels_only():
    model = models.build((32, 32, 3), 10, model_cfg(name="resnet20", weight_decay=1e-4))
    regularized = {l.name for l in model.layers if getattr(l, "kernel_regularizer", None) is not None}
    assert {l.name for l in model.layers if isinstance(l, (tf.keras.layers.Conv2D, tf.keras.layers.Dense))} == regularized
    assert all(getattr(l, "beta_regularizer", None) is None and getattr(l, "gamma_regularizer", None) is None
               for l in model.layers if isinstance(l, tf.keras.layers.BatchNormalization))
    kernel = model.get_layer("logits").kernel
    expected = 1e-4 / 2 * float(tf.reduce_sum(kernel ** 2))
    assert model.get_layer("logits").losses[0].numpy() == pytest.approx(expected, rel=1e-5)


def test_softmax_stays_float32_under_mixed_precision():
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = models.build((8, 8, 1), 10, model_cfg(name="small_cnn"))
        assert model.output.dtype == tf.float32
        assert model.get_layer("logits").compute_dtype == "float16"
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


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

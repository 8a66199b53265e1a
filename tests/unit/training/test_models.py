"""hvdkeras.training.models: the registered models, weight decay, mixed precision, and unknown names."""
import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import config as config_lib
from hvdkeras.common.errors import ConfigError
from hvdkeras.training import models


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
    convs = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.Conv2D)]
    assert len(convs) + 1 == 56  # 55 convolutions and the classifier
    out = model(tf.zeros((2, 32, 32, 3)))
    assert out.shape == (2, 10)
    assert trainable(models.build((32, 32, 3), 10, model_cfg(name="resnet20"))) == pytest.approx(270_000, rel=0.01)


def test_weight_decay_on_kernels_only():
    model = models.build((32, 32, 3), 10, model_cfg(name="resnet20", weight_decay=1e-4))
    regularized = {layer.name for layer in model.layers if getattr(layer, "kernel_regularizer", None) is not None}
    kernels = {layer.name for layer in model.layers
               if isinstance(layer, (tf.keras.layers.Conv2D, tf.keras.layers.Dense))}
    assert kernels == regularized
    assert all(getattr(layer, "beta_regularizer", None) is None and getattr(layer, "gamma_regularizer", None) is None
               for layer in model.layers if isinstance(layer, tf.keras.layers.BatchNormalization))
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


def test_unknown_model_name_is_a_config_error_naming_where_the_name_came_from():
    cfg = config_lib.load(None, ["model.name=vgg"])  # config.load does not know the registry's names
    with pytest.raises(ConfigError) as err:
        models.build((8, 8, 1), 10, cfg.model)
    assert str(err.value) == ("model.name must be one of mlp, resnet20, resnet50, resnet56, small_cnn or"
                              " applications.<Name> of keras.applications; received: 'vgg'")
    located = str(config_lib.locate(cfg, err.value))
    assert located.startswith("model.name in --set model.name=vgg must be one of mlp, resnet20, resnet50")
    assert located.endswith("; received: 'vgg'") and "\n" not in located


def test_unknown_keras_application_is_the_same_config_error():
    cfg = config_lib.load(None, ["model.name=applications.NoSuchNet"])
    with pytest.raises(ConfigError) as err:
        models.build((32, 32, 3), 10, cfg.model)
    assert str(config_lib.locate(cfg, err.value)) == (
        "model.name in --set model.name=applications.NoSuchNet must be one of mlp, resnet20, resnet50, resnet56,"
        " small_cnn or applications.<Name> of keras.applications; received: 'applications.NoSuchNet'")

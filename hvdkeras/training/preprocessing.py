"""Per-example image pipelines: the standard ImageNet, CIFAR and MNIST transforms.

Every random transform is a *stateless* op seeded per example (see
:mod:`hvdkeras.training.data`), so rank r's augmented stream is reproducible from the
config's seed, in any order of parallel execution.

* ImageNet training: random resized crop (area 8%-100%, aspect ratio 3/4-4/3,
  Szegedy et al.) decoded straight from the JPEG bytes, resized to ``size`` x
  ``size``, random horizontal flip.
* ImageNet evaluation: resize so the shorter side is ``size / 0.875`` (256 for
  224), center crop ``size`` x ``size``.
* Both then subtract the ImageNet mean and divide by its standard deviation, per
  channel (on the 0-255 scale: mean 123.675, 116.28, 103.53; std 58.395, 57.12, 57.375).
* CIFAR training: zero-pad 4 pixels on each side, random 32 x 32 crop, random
  horizontal flip; CIFAR evaluation: none. Both normalised by the CIFAR-10 channel
  mean and std.
* MNIST: pixels scaled to [0, 1].
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

import tensorflow as tf

IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CIFAR_MEAN = (0.4914 * 255, 0.4822 * 255, 0.4465 * 255)
CIFAR_STD = (0.2470 * 255, 0.2435 * 255, 0.2616 * 255)
EVAL_CROP_FRACTION = 0.875


def normalize(image: tf.Tensor, mean, std) -> tf.Tensor:
    """The image as float32, minus ``mean`` and divided by ``std`` per channel."""
    image = tf.cast(image, tf.float32)
    return (image - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)


def _split(seed: tf.Tensor, n: int):
    return tf.unstack(tf.random.experimental.stateless_split(seed, num=n))


def _decode_crop(image_bytes: tf.Tensor, offset_y, offset_x, height, width) -> tf.Tensor:
    """Decodes only the crop for JPEG (fast path); any other format is decoded whole, then cropped."""
    window = tf.stack([offset_y, offset_x, height, width])

    def jpeg():
        return tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)

    def other():
        image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
        return tf.image.crop_to_bounding_box(image, offset_y, offset_x, height, width)

    return tf.cond(tf.io.is_jpeg(image_bytes), jpeg, other)


def _image_shape(image_bytes: tf.Tensor) -> tf.Tensor:
    return tf.cond(tf.io.is_jpeg(image_bytes),
                   lambda: tf.image.extract_jpeg_shape(image_bytes),
                   lambda: tf.shape(tf.io.decode_image(image_bytes, channels=3, expand_animations=False)))


def imagenet_train(image_bytes: tf.Tensor, seed: tf.Tensor, size: int = 224) -> tf.Tensor:
    """ImageNet training input from encoded bytes: seeded random crop resized to ``size``, flip, normalize."""
    crop_seed, flip_seed = _split(seed, 2)
    shape = _image_shape(image_bytes)
    whole = tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4])
    begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
        shape, bounding_boxes=whole, seed=crop_seed, min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3),
        area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
    offset_y, offset_x, _ = tf.unstack(begin)
    height, width, _ = tf.unstack(crop_size)
    image = _decode_crop(image_bytes, offset_y, offset_x, height, width)
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return normalize(image, IMAGENET_MEAN, IMAGENET_STD)


def imagenet_eval(image_bytes: tf.Tensor, size: int = 224) -> tf.Tensor:
    """ImageNet evaluation input: shorter side to ``size / EVAL_CROP_FRACTION``, center crop, normalize."""
    image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = (size / EVAL_CROP_FRACTION) / tf.reduce_min(shape)
    resized = tf.cast(tf.round(shape * scale), tf.int32)
    image = tf.image.resize(image, resized, method="bilinear")
    top = (resized[0] - size) // 2
    left = (resized[1] - size) // 2
    image = tf.image.crop_to_bounding_box(image, top, left, size, size)
    return normalize(image, IMAGENET_MEAN, IMAGENET_STD)


def cifar_train(image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """CIFAR training augmentation: pad by 4, seeded random 32x32 crop and flip, normalize."""
    crop_seed, flip_seed = _split(seed, 2)
    image = tf.image.pad_to_bounding_box(image, 4, 4, 40, 40)
    image = tf.image.stateless_random_crop(image, [32, 32, 3], crop_seed)
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return normalize(image, CIFAR_MEAN, CIFAR_STD)


def cifar_eval(image: tf.Tensor) -> tf.Tensor:
    """CIFAR evaluation: normalize only."""
    return normalize(image, CIFAR_MEAN, CIFAR_STD)


def scale_unit(image: tf.Tensor) -> tf.Tensor:
    """The image as float32 in ``[0, 1]``."""
    return tf.cast(image, tf.float32) / 255.0


class Pipeline:
    """How one dataset family turns a stored example into a model input.

    ``train(image, seed)`` and ``evaluate(image)`` take the stored image (encoded
    bytes when ``encoded`` is true, else a uint8 tensor) and return float32.
    """

    def __init__(self, name: str, train: Callable, evaluate: Callable, encoded: bool,
                 output_shape: Callable[[Tuple[int, ...]], Tuple[int, ...]]):
        self.name = name
        self.train = train
        self.evaluate = evaluate
        self.encoded = encoded
        self.output_shape = output_shape


def pipelines(image_size: int) -> Dict[str, Pipeline]:
    """The pipelines by name; ``image_size`` is the ImageNet crop (224 by default)."""
    return {
        "imagenet": Pipeline("imagenet", lambda im, s: imagenet_train(im, s, image_size),
                             lambda im: imagenet_eval(im, image_size), encoded=True,
                             output_shape=lambda stored: (image_size, image_size, 3)),
        "cifar": Pipeline("cifar", cifar_train, lambda im: cifar_eval(im), encoded=False,
                          output_shape=lambda stored: (32, 32, 3)),
        "mnist": Pipeline("mnist", lambda im, s: scale_unit(im), scale_unit, encoded=False,
                          output_shape=lambda stored: tuple(stored)),
    }


# Which pipeline a TFDS dataset uses when data.pipeline is "auto".
AUTO = {"imagenet2012": "imagenet", "imagenet2012_subset": "imagenet", "imagenette": "imagenet",
        "cifar10": "cifar", "cifar100": "cifar", "mnist": "mnist", "fashion_mnist": "mnist", "kmnist": "mnist"}

"""A tiny real TensorFlow Datasets dataset, generated on disk offline, for sharding tests.

`HvdkerasTiny`: 8x8 RGB images whose first pixel encodes the example id; splits
train (TRAIN examples) and test (TEST examples), written as real TFRecord files in
several shards, so tfds.even_splits and file reading run for real.
"""
import numpy as np
import tensorflow_datasets as tfds

TRAIN, TEST = 52, 17


def image_for(i: int) -> np.ndarray:
    image = np.zeros((8, 8, 3), np.uint8)
    image[0, 0] = [i % 256, i // 256, 7]
    return image


def example_id(image) -> int:
    """The id an image was generated from (undoes image_for)."""
    return int(image[0, 0, 0]) + 256 * int(image[0, 0, 1])


class HvdkerasTiny(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(8, 8, 3)),
                "label": tfds.features.ClassLabel(num_classes=3),
                "id": np.int64,
            }),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, TRAIN), "test": self._generate_examples(1000, TEST)}

    def _generate_examples(self, start, count):
        for i in range(start, start + count):
            yield i, {"image": image_for(i), "label": i % 3, "id": i}


def prepare(data_dir: str) -> None:
    builder = HvdkerasTiny(data_dir=data_dir)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(max_examples_per_split=None, try_download_gcs=False))

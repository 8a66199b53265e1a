"""MNIST's shape without a download, for Horovod's examples on machines with no internet.

``load_data()`` returns what ``keras.datasets.mnist.load_data()`` returns:
``((x_train, y_train), (x_test, y_test))``, 28x28 ``uint8`` images of the digits 0-9
and ``uint8`` labels. The images are the 1,797 8x8 handwritten digits that hvdkeras
ships (``hvdkeras.training.data.digits_arrays``), each pixel scaled to 3x3 and padded to 28x28; the last
297 are the test set. A real MNIST file is used instead when ``path`` names one
(``mnist.npz`` as Keras downloads it).
"""
import os

import numpy as np


def load_data(path=None):
    if path and os.path.exists(path):
        with np.load(path) as f:
            return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])
    from hvdkeras.training.data import digits_arrays

    pixels, target = digits_arrays()
    images = np.kron(pixels.reshape(-1, 8, 8), np.ones((3, 3)))  # 8x8 -> 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2)))  # -> 28x28, MNIST's border
    images = np.round(images * (255.0 / 16.0)).astype("uint8")
    labels = target.astype("uint8")
    return (images[:1500], labels[:1500]), (images[1500:], labels[1500:])


def write_libsvm(path):
    """Writes every image of :func:`load_data` (train, then test) to ``path`` as LIBSVM's MNIST file: one
    ``label index:value ...`` line per image, the 784 pixels' nonzero values with indices from 1, compressed
    with bz2 when ``path`` ends in ``.bz2`` (as ``mnist.bz2`` is downloaded from LIBSVM's site)."""
    import bz2

    (x_train, y_train), (x_test, y_test) = load_data()
    images = np.concatenate([x_train, x_test]).reshape(-1, 784)
    labels = np.concatenate([y_train, y_test])
    lines = []
    for label, pixels in zip(labels, images):
        (nonzero,) = np.nonzero(pixels)
        lines.append(" ".join([str(int(label))] + [f"{i + 1}:{int(pixels[i])}" for i in nonzero]))
    data = ("\n".join(lines) + "\n").encode()
    with open(path, "wb") as f:
        f.write(bz2.compress(data) if path.endswith(".bz2") else data)

"""Prints ``RESULT {"max_diff": ..., "layers": ...}``: how far apart the weights of two workdirs' exported models
are (``<workdir>/export/model.keras``), 0.0 when bit for bit the same.

    python tests/distributed/scripts/compare_exports.py WORKDIR_A WORKDIR_B
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from hvdkeras.runtime import tensorflow_import  # noqa: E402

tensorflow_import.load()
import numpy as np  # noqa: E402

from hvdkeras.runtime.compat import keras  # noqa: E402


def weights(workdir):
    model = keras.models.load_model(os.path.join(workdir, "export", "model.keras"), compile=False)
    return [np.asarray(w) for w in model.get_weights()]


a, b = weights(sys.argv[1]), weights(sys.argv[2])
diff = max(float(np.max(np.abs(x - y))) if x.size else 0.0 for x, y in zip(a, b))
print("RESULT " + json.dumps({"max_diff": diff, "layers": [len(a), len(b)]}))

"""hvdkeras.runtime.export: the trained model as model.keras and a SavedModel, loadable where hvdkeras is not."""
import os
import subprocess
import sys
import textwrap

import numpy as np

from hvdkeras import config as config_lib
from hvdkeras.runtime import export
from tests.unit.helpers import REPO, config_file

# Run in a fresh process where hvdkeras and Horovod cannot be imported: what a serving host has.
LOAD_WITHOUT_HVDKERAS = textwrap.dedent("""
    import sys
    sys.modules["hvdkeras"] = None
    sys.modules["horovod"] = None
    import numpy as np
    import tensorflow as tf
    keras_file, saved_model, x_file, out = sys.argv[1:]
    x = np.load(x_file)
    model = tf.keras.models.load_model(keras_file, compile=False)
    loaded = tf.saved_model.load(saved_model)  # kept: its variables live as long as it does
    served = loaded.serve(tf.constant(x))
    np.savez(out, keras=model.predict(x, verbose=0), served=served.numpy())
""")


def test_the_trained_model_is_exported_and_loads_without_hvdkeras(hvd_single, tmp_path, restore_environment):
    from hvdkeras.training.trainer import Trainer

    workdir = str(tmp_path / "run")
    cfg = config_lib.load(config_file("digits.yaml"), ["trainer.epochs=1", "trainer.steps_per_epoch=3",
                                                       "trainer.verbose=0"])
    trainer = Trainer.from_config(cfg, workdir)
    trainer.fit()
    where = export.paths(workdir)
    assert sorted(os.listdir(os.path.join(workdir, "export"))) == ["model.keras", "saved_model"]
    assert not [n for n in os.listdir(os.path.join(workdir, "export")) if n.startswith(".saving-")]
    x = np.random.RandomState(0).uniform(size=(5, 8, 8, 1)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_HVDKERAS, where["keras"], where["saved_model"],
                           str(tmp_path / "x.npy"), str(tmp_path / "out.npz")], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=180, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = trainer.model.predict(x, verbose=0)
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["keras"], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out["served"], expected, rtol=1e-5, atol=1e-6)


def test_export_can_be_switched_off(hvd_single, tmp_path, restore_environment):
    from hvdkeras.training.trainer import Trainer

    workdir = str(tmp_path / "run")
    cfg = config_lib.load(config_file("digits.yaml"), ["trainer.epochs=1", "trainer.steps_per_epoch=1",
                                                       "trainer.verbose=0", "trainer.export=false"])
    Trainer.from_config(cfg, workdir).fit()
    assert "export" not in os.listdir(workdir)


def test_paths():
    assert export.paths(os.path.join(REPO, "w")) == {"keras": os.path.join(REPO, "w", "export", "model.keras"),
                                                     "saved_model": os.path.join(REPO, "w", "export", "saved_model")}


def test_a_model_of_named_inputs_and_outputs_is_exported_and_predicts_from_a_mapping(tmp_path):
    """Keras 2's own ``export`` would serve it from a list of its inputs; both stacks serve the mapping."""
    import importlib.util

    import tensorflow as tf

    spec = importlib.util.spec_from_file_location(
        "shop_task_export", os.path.join(REPO, "examples", "own_model_and_data", "shop_task.py"))
    shop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shop)
    model = shop.model()
    where = export.export(model, str(tmp_path))
    x, _, _ = shop.arrays(5, seed=1)
    expected = model.predict(x, verbose=0)
    assert sorted(expected) == ["buy", "price"]
    loaded = tf.keras.models.load_model(where["keras"], compile=False)
    served = tf.saved_model.load(where["saved_model"])
    by_signature = served.signatures["serving_default"](**{k: tf.constant(v) for k, v in x.items()})
    for got in (loaded.predict(x, verbose=0), served.serve(x), by_signature):
        assert sorted(got) == ["buy", "price"]
        for name in got:
            np.testing.assert_allclose(np.asarray(got[name]), expected[name], rtol=1e-5, atol=1e-6)

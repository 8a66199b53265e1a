"""hvdkeras.spark.keras.persistence: a saved estimator or model is plain JSON and a Keras file; loading runs no code."""
import base64
import json
import os
import sys

import numpy as np
import pytest

pytest.importorskip("pyspark")

from hvdkeras.common.errors import SetupError  # noqa: E402
from hvdkeras.runtime.compat import keras  # noqa: E402
from hvdkeras.spark.keras.estimator import KerasEstimator, KerasModel  # noqa: E402
from hvdkeras.spark.keras.persistence import ParamsWriter  # noqa: E402


def scaled_mse(y_true, y_pred):
    """A custom loss in an importable module, as a user's package has them."""
    return 2.0 * keras.losses.mean_squared_error(y_true, y_pred)


class Marker:
    """A pickle that creates a file when it is loaded: what a hostile saved folder can hold."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def small_model():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])


def test_a_model_saves_as_json_and_a_keras_file_and_loads_the_same(tmp_path):
    model = KerasModel(model=small_model(), feature_columns=["features"], label_columns=["label"], run_id="r1",
                       history={"loss": [0.5, 0.25]}, custom_objects={"scaled_mse": scaled_mse})
    model.setOutputCols(["label_prob"])
    path = str(tmp_path / "saved")
    model.save(path)
    assert sorted(os.listdir(path)) == ["metadata", "model.keras"]
    metadata = json.loads((tmp_path / "saved" / "metadata").read_text())
    assert metadata["format"] == "hvdkeras-json-1"
    assert metadata["paramMap"]["custom_objects"] == {
        "$dict": {"scaled_mse": {"$import": "tests.unit.spark.test_persistence:scaled_mse"}}}
    assert metadata["paramMap"]["history"] == {"$dict": {"loss": [0.5, 0.25]}}
    loaded = KerasModel.load(path)
    assert loaded.getOrDefault("custom_objects") == {"scaled_mse": scaled_mse}  # by import, not by pickle
    assert loaded.getOutputCols() == ["label_prob"] and loaded.getOrDefault("run_id") == "r1"
    assert loaded.uid == model.uid
    for a, b in zip(loaded.getModel().get_weights(), model.getModel().get_weights()):
        assert (a == b).all()


def test_an_estimator_saves_its_keras_objects_as_their_configs(tmp_path):
    est = KerasEstimator(model=small_model(), optimizer=keras.optimizers.SGD(0.125), loss=scaled_mse,
                         metrics=["accuracy", keras.metrics.AUC(name="auc")], feature_cols=["x"], label_cols=["y"],
                         batch_size=8, epochs=3)
    path = str(tmp_path / "est")
    est.save(path)
    saved = json.loads((tmp_path / "est" / "metadata").read_text())["paramMap"]
    assert saved["optimizer"]["$keras"] and saved["loss"] == {"$import": "tests.unit.spark.test_persistence:scaled_mse"}
    loaded = KerasEstimator.load(path)
    assert float(np.asarray(loaded.getOptimizer().learning_rate)) == 0.125
    assert loaded.getLoss() is scaled_mse and loaded.getBatchSize() == 8 and loaded.getEpochs() == 3
    assert loaded.getMetrics()[0] == "accuracy" and loaded.getMetrics()[1].name == "auc"


def test_a_parameter_without_a_json_form_is_refused_naming_it(tmp_path):
    est = KerasEstimator(model=small_model(), callbacks=[keras.callbacks.TerminateOnNaN()])
    with pytest.raises(SetupError, match=r"^cannot save parameter 'callbacks' of KerasEstimator: a keras\..*"
                                         r"TerminateOnNaN object, which has no JSON form; save without it"):
        est.save(str(tmp_path / "est"))

    def local_loss(y_true, y_pred):
        return y_pred

    with pytest.raises(SetupError, match=r"cannot save parameter 'loss' .*<locals>.*define it in a module of your"):
        KerasEstimator(loss=local_loss).save(str(tmp_path / "est2"))


def _in_main(monkeypatch, fn, name):
    """``fn`` as the running script defines it at its top level: ``__main__``'s ``name``."""
    fn.__module__, fn.__qualname__, fn.__name__ = "__main__", name, name
    monkeypatch.setattr(sys.modules["__main__"], name, fn, raising=False)
    return fn


def test_a_scripts_own_custom_objects_save_by_name_and_load_in_the_script_that_defines_them(tmp_path, monkeypatch):
    # Horovod's Rossmann example: a metric and an activation defined in the script, in custom_objects, then
    # keras_model.save(path). They save by name, as Keras saves them in model.keras; loading runs none of their code.
    def exp_rmspe(y_true, y_pred):
        return y_pred

    def act_scaled(x):
        return keras.activations.sigmoid(x) * 3.0

    custom = {"exp_rmspe": _in_main(monkeypatch, exp_rmspe, "exp_rmspe"),
              "act_scaled": _in_main(monkeypatch, act_scaled, "act_scaled")}
    net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation=act_scaled)])
    path = str(tmp_path / "saved")
    KerasModel(model=net, feature_columns=["x"], label_columns=["y"], custom_objects=custom).save(path)
    saved = json.loads((tmp_path / "saved" / "metadata").read_text())["paramMap"]["custom_objects"]
    assert saved == {"$dict": {"exp_rmspe": {"$import": "__main__:exp_rmspe"},
                               "act_scaled": {"$import": "__main__:act_scaled"}}}
    loaded = KerasModel.load(path)
    assert loaded.getOrDefault("custom_objects") == custom
    for a, b in zip(loaded.getModel().get_weights(), net.get_weights()):
        assert (a == b).all()

    monkeypatch.delattr(sys.modules["__main__"], "act_scaled")  # another script, which does not define it
    with pytest.raises(SetupError, match=r"parameter 'custom_objects' cannot be loaded here \(act_scaled was defined"
                                         r" in the script that saved it \(__main__:act_scaled\); load it from a script"
                                         r" that defines act_scaled too\)"):
        KerasModel.load(path)


def test_a_scripts_function_that_its_name_does_not_find_again_is_refused(tmp_path, monkeypatch):
    def first(y_true, y_pred):
        return y_pred

    def second(y_true, y_pred):
        return y_true

    _in_main(monkeypatch, first, "loss_fn")
    second.__module__, second.__qualname__ = "__main__", "loss_fn"  # redefined since: the name is another's now
    with pytest.raises(SetupError, match=r"cannot save parameter 'loss' .*: __main__:loss_fn does not import as"):
        KerasEstimator(loss=second).save(str(tmp_path / "est"))


def _pickled_folder(tmp_path, params):
    """A folder in the earlier format: each parameter a base64 pickle (as Horovod's estimator saves them too)."""
    import cloudpickle

    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "metadata").write_text(json.dumps({
        "class": "hvdkeras.spark.keras.estimator.KerasModel", "uid": "KerasModel_old", "defaultParamMap": {},
        "paramMap": {k: base64.b64encode(cloudpickle.dumps(v)).decode() for k, v in params.items()}}))
    return str(folder)


def test_a_folder_whose_metadata_would_run_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    path = _pickled_folder(tmp_path, {"run_id": Marker(str(marker))})
    with pytest.raises(SetupError, match=r"^.*/old/metadata holds pickles \(field paramMap.run_id; .*\), which run"
                                         r" code when loaded: load it with KerasModel.load\(path, safe_mode=False\)"):
        KerasModel.load(path)
    assert not marker.exists()


def test_the_earlier_format_loads_with_the_explicit_opt_in(tmp_path):
    path = _pickled_folder(tmp_path, {"run_id": "r0", "feature_columns": ["f"]})
    loaded = KerasModel.load(path, safe_mode=False)
    assert loaded.getOrDefault("run_id") == "r0" and loaded.uid == "KerasModel_old"


def test_metadata_that_is_not_json_or_of_another_class_is_one_line(tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "metadata").write_text("\x80not json")
    with pytest.raises(SetupError, match=r"/bad/metadata is not JSON: not a saved KerasModel$"):
        KerasModel.load(str(folder))
    (folder / "metadata").write_text(json.dumps({"class": "x.KerasEstimator", "paramMap": {}}))
    with pytest.raises(SetupError, match=r"holds a saved KerasEstimator, not a KerasModel: load it with"):
        KerasModel.load(str(folder))


def test_overwrite_removes_a_saved_model_through_fsspec_and_nothing_else(tmp_path):
    writer = ParamsWriter(KerasModel())
    saved, other = tmp_path / "saved", tmp_path / "other"
    saved.mkdir()
    (saved / "metadata").write_text("{}")
    (saved / "model.keras").write_bytes(b"x")
    writer._handleOverwrite(str(saved))  # Spark's own would need Hadoop's connector on an object store
    assert not saved.exists()
    writer._handleOverwrite(str(tmp_path / "absent"))
    other.mkdir()
    (other / "data.csv").write_text("1,2")
    with pytest.raises(SetupError, match=r"exists and holds no saved model .*: overwrite removes only a saved model"):
        writer._handleOverwrite(str(other))
    assert (other / "data.csv").exists()


def _plant(where, module_path, marker):
    """A payload module at ``where/module_path`` that creates ``marker`` when imported; a class ``x`` in it."""
    path = where / module_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"open({str(marker)!r}, 'w').close()\nclass x:\n    pass\n")


def _with_import(saved, tmp_path, name, target):
    """A copy of the saved model folder ``saved`` whose metadata's custom_objects name ``target`` by ``$import``."""
    import shutil

    folder = tmp_path / name
    shutil.copytree(saved, folder)
    metadata = json.loads((folder / "metadata").read_text())
    metadata["paramMap"]["custom_objects"] = {"$dict": {"x": {"$import": target}}}
    (folder / "metadata").write_text(json.dumps(metadata))
    return folder


def _with_keras_module(saved, tmp_path, name, module):
    """A copy of ``saved`` whose model.keras names ``module`` for its Dense layer (the pattern of CVE-2025-1550)."""
    import shutil
    import zipfile

    folder = tmp_path / name
    shutil.copytree(saved, folder)
    with zipfile.ZipFile(saved / "model.keras") as src, zipfile.ZipFile(folder / "model.keras", "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                text = data.decode()
                assert '"module": "keras.layers"' in text
                data = text.replace('"module": "keras.layers"', f'"module": "{module}"', 1).encode()
            dst.writestr(item, data)
    return folder


def test_a_saved_folder_that_names_code_beside_or_inside_it_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    """A notebook's, a pyspark shell's or a script's working directory holds the saved folder and a payload: beside
    it, inside it (the saved folder as a namespace package), as a namespace package of its own, or named by the
    model.keras's config.json. Loading from there (the working directory first on sys.path, as in ``python -c``)
    refuses each in one line naming the module and its folder; no payload runs."""
    KerasModel(model=small_model(), feature_columns=["f"], label_columns=["y"], run_id="r1").save(
        str(tmp_path / "clean"))
    folders = [_with_import(tmp_path / "clean", tmp_path, "beside", "payload_beside:x"),
               _with_import(tmp_path / "clean", tmp_path, "inside", "inside.payload:x"),
               _with_import(tmp_path / "clean", tmp_path, "namespace", "nspkg.sub.payload:x"),
               _with_keras_module(tmp_path / "clean", tmp_path, "archive", "payload_keras")]
    marker = tmp_path / "MARKER"
    for planted in ("payload_beside.py", "inside/payload.py", "nspkg/sub/payload.py", "payload_keras.py"):
        _plant(tmp_path, planted, marker)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")  # the working directory, first
    says = "which no installed package holds (the working directory, the saved folder or another folder on sys.path)"
    for folder, (module, where) in zip(folders, [("payload_beside", "payload_beside.py"), ("inside.payload", "inside"),
                                                 ("nspkg.sub.payload", "nspkg"),
                                                 ("payload_keras", "payload_keras.py")]):
        with pytest.raises(SetupError) as err:
            KerasModel.load(folder.name)
        line = str(err.value)
        assert f"names module {module!r}, found in {tmp_path / where}," in line and says in line, line
        assert "\n" not in line
    assert not marker.exists()
    assert not [m for m in sys.modules if m.split(".")[0] in ("payload_beside", "inside", "nspkg", "payload_keras")]
    assert KerasModel.load("clean").getOrDefault("run_id") == "r1"


def test_a_module_whose_objects_custom_objects_give_by_name_is_not_imported_so_not_checked(tmp_path, monkeypatch):
    """An executor's transform: a custom object Keras takes from custom_objects by the name it looks up (a function's
    name, a class's registered name) needs no import of its module, though that module sits in a folder that is not
    installed (a user's PYTHONPATH); a built-in's module, which Keras imports whatever custom_objects holds, is still
    checked."""
    import io
    import json
    import zipfile

    from hvdkeras.spark.keras.serialization import model_from_bytes, named_modules

    def archive(config):
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            z.writestr("config.json", json.dumps(config))
        return out.getvalue()

    blob = archive({"module": "keras", "class_name": "Functional", "config": {"layers": [
        {"module": "users_losses", "class_name": "function", "config": "my_loss", "registered_name": "function"},
        {"module": "users_layers", "class_name": "MyLayer", "registered_name": "mine>MyLayer", "config": {}},
        {"module": "planted", "class_name": "Dense", "registered_name": None, "config": {}}]}})
    assert named_modules(blob) == ["users_losses", "users_layers", "planted"]
    assert named_modules(blob, given={"my_loss", "mine>MyLayer", "Dense"}) == ["planted"]
    assert named_modules(blob, given={"MyLayer"}) == ["users_losses", "users_layers", "planted"]
    (tmp_path / "planted.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SetupError, match="names module 'planted'"):
        model_from_bytes(blob, {"Dense": keras.layers.Dense})


def test_bytes_that_are_not_a_keras_archive_name_no_module():
    # an H5 model (BestModelCheckpoint's .h5 file, say): Keras reads it without importing what it names
    from hvdkeras.spark.keras.serialization import named_modules

    assert named_modules(b"\x89HDF\r\n\x1a\n not a zip") == []

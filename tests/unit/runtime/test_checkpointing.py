"""hvdkeras.runtime.checkpointing: atomic per-epoch checkpoint folders, found, restored and cleaned up."""
import os

import numpy as np
import pytest

from hvdkeras.common.errors import CheckpointError
from hvdkeras.runtime import checkpointing
from hvdkeras.runtime.compat import keras
from tests.unit.helpers import small_bn_model, xy


def test_crash_mid_write_leaves_previous_checkpoint_as_latest(hvd_single, tmp_path):
    model = small_bn_model()
    store = checkpointing.CheckpointStore(str(tmp_path), keep=3)
    trackable = checkpointing.trackable_for(model)
    store.save(1, trackable, {})

    class Exploding:
        def write(self, prefix):
            trackable.write(prefix)  # the data lands, then the process dies before meta.json
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        store.save(2, Exploding(), {})
    assert store.latest().epoch == 1
    assert sorted(os.listdir(tmp_path)) == ["epoch-0001"]

    # temp folders left by a hard kill (an older version's, a save's staging, a removal's) are ignored, then cleaned
    os.makedirs(tmp_path / ".epoch-0002.tmp-abc")
    (tmp_path / ".epoch-0002.tmp-abc" / "ckpt.index").write_text("partial")
    os.makedirs(tmp_path / ".saving-xyz" / "epoch-0004")
    (tmp_path / ".saving-xyz" / "epoch-0004" / "meta.json").write_text('{"epoch": 4}')
    os.makedirs(tmp_path / ".deleting-xyz" / "old")
    os.makedirs(tmp_path / "epoch-0003")  # no meta.json: incomplete
    assert store.latest().epoch == 1 and [c.epoch for c in store.list()] == [1]  # what evaluate and resume read
    store.remove_stale()
    assert sorted(os.listdir(tmp_path)) == ["epoch-0001", "epoch-0003"]


def test_restore_round_trip_and_mismatch_error(hvd_single, tmp_path):
    model = small_bn_model(seed=1)
    model.fit(*xy(16, 0), epochs=1, verbose=0)
    store = checkpointing.CheckpointStore(str(tmp_path))
    info = store.save(3, checkpointing.trackable_for(model), {})

    other = small_bn_model(seed=2)
    other.optimizer.build(other.trainable_variables)
    store.restore(info, checkpointing.trackable_for(other))
    for a, b in zip(model.variables + model.optimizer.variables, other.variables + other.optimizer.variables):
        assert np.array_equal(a.numpy(), b.numpy())

    wrong = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5)])
    wrong.compile(keras.optimizers.SGD(0.1), "mse")
    wrong.optimizer.build(wrong.trainable_variables)
    with pytest.raises(CheckpointError, match="does not fit this model"):
        store.restore(info, checkpointing.trackable_for(wrong))


def _three_checkpoints(tmp_path):
    model = small_bn_model()
    store = checkpointing.CheckpointStore(str(tmp_path), keep=0)
    trackable = checkpointing.trackable_for(model)
    for epoch in (1, 2):
        store.save(epoch, trackable, {})
    store.save(2, trackable, {}, batch=5)  # preempted after batch 5 of epoch 3
    return store


def test_mid_epoch_checkpoints_are_named_and_ordered_by_position(hvd_single, tmp_path):
    store = _three_checkpoints(tmp_path)
    assert [c.position for c in store.list()] == [(1, 0), (2, 0), (2, 5)]
    latest = store.latest_intact()
    assert os.path.basename(latest.path) == "epoch-0002-batch-0005" and latest.meta["batch"] == 5
    assert latest.describe() == "epoch 2, batch 5 of epoch 3"


def test_manifest_lists_every_file_with_size_and_digest(hvd_single, tmp_path):
    store = _three_checkpoints(tmp_path)
    folder = store.latest().path
    manifest = __import__("json").loads(open(os.path.join(folder, "manifest.json")).read())["files"]
    assert set(manifest) == set(os.listdir(folder)) - {"manifest.json"}
    assert all(len(entry["sha256"]) == 64 and entry["size"] > 0 for entry in manifest.values())
    assert checkpointing.verify(folder) is None


def _data_file(folder):
    return os.path.join(folder, next(n for n in sorted(os.listdir(folder)) if n.startswith("ckpt.data")))


@pytest.mark.parametrize("damage, said", [
    ("truncate", "has {n} bytes, the manifest says"),
    ("remove", "is missing"),
    ("flip", "does not match its SHA-256"),
    ("manifest", "manifest.json is missing"),
])
def test_a_damaged_latest_checkpoint_is_named_kept_aside_and_the_one_before_is_used(hvd_single, tmp_path, damage,
                                                                                     said):
    store = _three_checkpoints(tmp_path)
    bad = store.latest().path
    data = _data_file(bad)
    if damage == "truncate":
        with open(data, "r+b") as f:
            f.truncate(7)
        said = said.format(n=7)
    elif damage == "remove":
        os.remove(data)
    elif damage == "flip":
        raw = bytearray(open(data, "rb").read())
        raw[len(raw) // 2] ^= 0xFF
        open(data, "wb").write(bytes(raw))
    else:
        os.remove(os.path.join(bad, "manifest.json"))
    lines = []
    found = store.latest_intact(warn=lines.append)
    assert found.position == (2, 0)
    assert len(lines) == 1 and bad in lines[0] and said in lines[0] and "damaged-epoch-0002-batch-0005-1" in lines[0]
    assert os.path.isdir(tmp_path / "damaged-epoch-0002-batch-0005-1")  # never deleted
    # the damaged one no longer counts, and pruning never touches it
    store.keep = 1
    store.prune()
    assert sorted(os.listdir(tmp_path)) == ["damaged-epoch-0002-batch-0005-1", "epoch-0002"]


def test_resume_falls_back_on_every_rank(hvd_single, tmp_path, capsys):
    store = _three_checkpoints(tmp_path)
    os.remove(_data_file(store.latest().path))
    info = checkpointing.resume(store, checkpointing.trackable_for(small_bn_model()))
    assert info.position == (2, 0)
    assert "[hvdkeras] warning: checkpoint" in capsys.readouterr().err  # warnings: standard error (hvdkeras.common.log)


@pytest.mark.parametrize("error", [
    OSError(28, "No space left on device"),
    RuntimeError("UNKNOWN: ckpt_temp/part-00000-of-00001.data; No space left on device"),
])
def test_a_full_disk_during_a_save_leaves_the_previous_checkpoint_intact(hvd_single, tmp_path, error):
    store = checkpointing.CheckpointStore(str(tmp_path), keep=3)
    trackable = checkpointing.trackable_for(small_bn_model())
    store.save(6, trackable, {})

    class FullDisk:
        def write(self, prefix):
            open(prefix + ".data-00000-of-00001", "wb").write(b"partial")
            raise error

    with pytest.raises(CheckpointError) as caught:
        store.save(7, FullDisk(), {})
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(f"no space left on {checkpointing.mount_point(str(tmp_path))} while writing checkpoint"
                           " epoch 7; epoch 6 is intact")
    assert sorted(os.listdir(tmp_path)) == ["epoch-0006"] and store.latest_intact().epoch == 6


def test_other_write_errors_name_the_cause_and_the_intact_one(hvd_single, tmp_path):
    store = checkpointing.CheckpointStore(str(tmp_path))

    class Broken:
        def write(self, prefix):
            raise PermissionError(13, "Permission denied")

    with pytest.raises(CheckpointError, match=r"cannot write checkpoint epoch 1 in .*Permission denied.*; no earlier"):
        store.save(1, Broken(), {})


def _plain_checkpoints(tmp_path, epochs=(1, 2, 3)):
    """Checkpoint folders as CheckpointStore.save lays them out (a data file, meta.json, the manifest last)."""
    import json

    for epoch in epochs:
        folder = tmp_path / f"epoch-{epoch:04d}"
        folder.mkdir()
        (folder / "ckpt.data-00000-of-00001").write_bytes(bytes([epoch]) * 64)
        (folder / "meta.json").write_text(json.dumps({"epoch": epoch, "batch": 0}))
        checkpointing.write_manifest(str(folder))
    return checkpointing.CheckpointStore(str(tmp_path), keep=0)


def _manifest_with(folder, rel, content=b"x"):
    import json

    path = os.path.join(folder, "manifest.json")
    manifest = json.loads(open(path).read())
    manifest["files"][rel] = {"size": len(content), "sha256": __import__("hashlib").sha256(content).hexdigest()}
    open(path, "w").write(json.dumps(manifest))


@pytest.mark.parametrize("tamper, said", [
    ("rename", "its name says epoch 9, batch 0, but its meta.json says epoch 3, batch 0: renamed"),
    ("dotdot", "manifest.json lists '../outside', outside its folder"),
    ("absolute", "manifest.json lists '/etc/hostname', outside its folder"),
    ("symlink", "ckpt.data-00000-of-00001 is a symbolic link"),
])
def test_a_renamed_or_tampered_checkpoint_is_damaged_kept_aside_and_the_one_before_is_used(tmp_path, tamper, said):
    store = _plain_checkpoints(tmp_path)
    bad = str(tmp_path / "epoch-0003")
    if tamper == "rename":  # epoch-0003 -> epoch-0009 would skip six epochs
        os.rename(bad, tmp_path / "epoch-0009")
        bad = str(tmp_path / "epoch-0009")
    elif tamper == "dotdot":
        (tmp_path / "outside").write_bytes(b"x")
        _manifest_with(bad, "../outside")
    elif tamper == "absolute":
        _manifest_with(bad, "/etc/hostname")
    else:  # the data file swapped for a link to a file elsewhere with the same bytes
        data = os.path.join(bad, "ckpt.data-00000-of-00001")
        (tmp_path / "elsewhere").write_bytes(open(data, "rb").read())
        os.remove(data)
        os.symlink(tmp_path / "elsewhere", data)
    lines = []
    found = store.latest_intact(warn=lines.append)
    assert found.position == (2, 0)
    assert len(lines) == 1 and said in lines[0] and "\n" not in lines[0], lines
    assert os.path.isdir(os.path.join(tmp_path, f"damaged-{os.path.basename(bad)}-1"))  # kept


def test_a_checkpoint_whose_meta_and_name_agree_verifies(tmp_path):
    store = _plain_checkpoints(tmp_path, epochs=(4,))
    assert checkpointing.verify(store.latest().path) is None

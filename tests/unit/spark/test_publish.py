"""hvdkeras.spark.common.publish: rank 0's run mirrored to the store, on fsspec's memory filesystem (no server).

A checkpoint is published manifest last and trusted only whole; fetch takes the newest trusted one and
moves an untrusted one aside in the store, never deleting it; the store keeps ``keep`` checkpoints after
a publish; the store's options (credentials) reach no file.
"""
import json
import os
import uuid

import pytest

from hvdkeras.spark.common import publish
from hvdkeras.spark.common.publish import RunMirror
from hvdkeras.spark.common.store import Store

SECRET = "S3CR3T-never-written"


@pytest.fixture
def store():
    root = f"memory://hvdkeras-publish-{uuid.uuid4().hex}"
    made = Store.create(root, storage_options={"secret_token": SECRET})  # the memory filesystem takes any option
    yield made
    if made.fs.exists(made.get_localized_path(root)):
        made.fs.rm(made.get_localized_path(root), recursive=True)


def remote_of(store, run_id="run1"):
    return store.get_localized_path(store.get_run_path(run_id))


def save_checkpoint(local, name, payload):
    """A checkpoint folder as hvdkeras.runtime.checkpointing writes it: files, meta.json, then the manifest."""
    from hvdkeras.runtime.checkpointing import write_manifest

    folder = os.path.join(local, "checkpoints", name)
    os.makedirs(folder)
    with open(os.path.join(folder, "ckpt.index"), "wb") as f:
        f.write(payload[:3])
    with open(os.path.join(folder, "ckpt.data-00000-of-00001"), "wb") as f:
        f.write(payload)
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump({"epoch": publish.position(name)[0]}, f)
    write_manifest(folder)
    return folder


def mirror_of(store, local, keep=2):
    return RunMirror(store.fs, remote_of(store), str(local), keep=keep)


def stored_files(store, folder):
    return sorted(p.rsplit("/", 1)[-1] for p in store.fs.find(folder))


def test_a_checkpoint_is_published_manifest_last_with_the_runs_files(store, tmp_path, monkeypatch):
    local = tmp_path / "local"
    save_checkpoint(local, "epoch-0001", b"weights-1")
    (local / "metrics.jsonl").write_text('{"epoch": 1, "loss": 0.5}\n')
    (local / "config.yaml").write_text("trainer:\n  epochs: 3\n")
    mirror = mirror_of(store, local)
    order = []
    put = store.fs.put_file
    monkeypatch.setattr(store.fs, "put_file", lambda src, dst, **kw: (order.append(dst.rsplit("/", 1)[-1]),
                                                                      put(src, dst, **kw))[1])
    assert mirror.publish() == ["epoch-0001"]
    assert order[:4] == ["ckpt.data-00000-of-00001", "ckpt.index", "meta.json", "manifest.json"]
    folder = f"{mirror.remote_checkpoints}/epoch-0001"
    assert publish.problem(store.fs, folder) is None
    assert store.fs.cat(f"{mirror.remote}/metrics.jsonl") == b'{"epoch": 1, "loss": 0.5}\n'
    assert store.fs.cat(f"{mirror.remote}/config.yaml") == b"trainer:\n  epochs: 3\n"
    assert mirror.publish() == []  # nothing new: nothing uploaded again
    assert mirror.stored() == ["epoch-0001"]


@pytest.mark.parametrize("damage, problem", [
    ("no manifest", "manifest.json is missing"),
    ("missing", "ckpt.data-00000-of-00001 is missing"),
    ("changed", "ckpt.data-00000-of-00001 does not match its SHA-256 in the manifest"),
    ("shorter", "ckpt.data-00000-of-00001 has 3 bytes, the manifest says 9"),
    ("unreadable manifest", "manifest.json is unreadable (JSONDecodeError)"),
])
def test_a_published_checkpoint_is_trusted_only_whole(store, tmp_path, damage, problem):
    mirror = mirror_of(store, tmp_path / "local")
    save_checkpoint(tmp_path / "local", "epoch-0001", b"weights-1")
    mirror.publish()
    folder = f"{mirror.remote_checkpoints}/epoch-0001"
    data = f"{folder}/ckpt.data-00000-of-00001"
    if damage == "no manifest":
        store.fs.rm(f"{folder}/manifest.json")
    elif damage == "missing":
        store.fs.rm(data)
    elif damage == "changed":
        store.fs.pipe(data, b"weights-2")  # same size, other bytes
    elif damage == "shorter":
        store.fs.pipe(data, b"wei")
    else:
        store.fs.pipe(f"{folder}/manifest.json", b'{"files": ')
    assert publish.problem(store.fs, folder) == problem


def test_fetch_takes_the_newest_trusted_checkpoint_and_sets_an_untrusted_one_aside_never_deleting_it(store, tmp_path):
    from hvdkeras.runtime.checkpointing import verify

    first = mirror_of(store, tmp_path / "first", keep=0)
    for epoch in (1, 2, 3):
        save_checkpoint(tmp_path / "first", f"epoch-{epoch:04d}", f"weights-{epoch}".encode())
    (tmp_path / "first" / "metrics.jsonl").write_text("".join(f'{{"epoch": {e}}}\n' for e in (1, 2, 3)))
    first.publish()
    newest = f"{first.remote_checkpoints}/epoch-0003"
    store.fs.pipe(f"{newest}/ckpt.data-00000-of-00001", b"weights-X")  # damaged in the store
    lines = []
    again = mirror_of(store, tmp_path / "again", keep=0)
    assert again.fetch(warn=lines.append) == "epoch-0002"
    aside = f"{first.remote_checkpoints}/damaged-epoch-0003-1"
    assert lines == [f"checkpoint {newest} is damaged (ckpt.data-00000-of-00001 does not match its SHA-256 in the"
                     f" manifest); kept as {aside}, trying the one before it"]
    assert store.fs.cat(f"{aside}/ckpt.data-00000-of-00001") == b"weights-X"  # kept, out of the way
    assert again.stored() == ["epoch-0001", "epoch-0002"]
    fetched = tmp_path / "again" / "checkpoints"
    assert sorted(os.listdir(fetched)) == ["epoch-0002"]  # no staging folder left behind
    assert verify(str(fetched / "epoch-0002")) is None  # what the trainer's resume checks
    assert (tmp_path / "again" / "metrics.jsonl").read_text().count("\n") == 3
    # the resumed run saves epoch 3 again: published beside the damaged one, which stays
    save_checkpoint(tmp_path / "again", "epoch-0003", b"weights-3")
    assert again.publish() == ["epoch-0003"]
    assert publish.problem(store.fs, newest) is None and store.fs.exists(aside)


def test_the_next_fit_removes_the_uploads_a_killed_rank_left_half_done_and_keeps_the_runs_files(store, tmp_path):
    first = mirror_of(store, tmp_path / "first")
    save_checkpoint(tmp_path / "first", "epoch-0001", b"weights-1")
    (tmp_path / "first" / "metrics.jsonl").write_text('{"epoch": 1}\n')
    first.publish()
    left = [f"{first.remote}/metrics.jsonl.tmp-4242", f"{first.remote}/config.yaml.tmp-17",
            f"{first.remote_best}/model.keras.tmp-99"]  # _put_whole's names, the rank killed before the move
    for path in left:
        store.fs.pipe(path, b"half")
    store.fs.pipe(f"{first.remote}/notes.tmp-x", b"a user's file, not a staging name")
    again = mirror_of(store, tmp_path / "again")
    assert again.fetch(warn=pytest.fail) == "epoch-0001"
    assert not any(store.fs.exists(path) for path in left)
    assert stored_files(store, first.remote) == [
        "ckpt.data-00000-of-00001", "ckpt.index", "manifest.json", "meta.json", "metrics.jsonl", "notes.tmp-x"]
    assert (tmp_path / "again" / "metrics.jsonl").read_text() == '{"epoch": 1}\n'


def test_an_empty_store_fetches_nothing(store, tmp_path):
    mirror = mirror_of(store, tmp_path / "local")
    assert mirror.fetch(warn=pytest.fail) is None and mirror.stored() == []
    assert os.listdir(tmp_path / "local" / "checkpoints") == []


def test_an_untrusted_leftover_of_the_same_name_is_set_aside_before_a_publish(store, tmp_path):
    mirror = mirror_of(store, tmp_path / "local")
    store.fs.pipe(f"{mirror.remote_checkpoints}/epoch-0001/ckpt.index", b"half")  # a killed upload: no manifest
    save_checkpoint(tmp_path / "local", "epoch-0001", b"weights-1")
    mirror.publish()
    assert publish.problem(store.fs, f"{mirror.remote_checkpoints}/epoch-0001") is None
    assert store.fs.cat(f"{mirror.remote_checkpoints}/damaged-epoch-0001-1/ckpt.index") == b"half"


def test_the_store_keeps_keep_checkpoints_pruned_only_after_a_publish(store, tmp_path):
    local = tmp_path / "local"
    mirror = mirror_of(store, local, keep=2)
    store.fs.pipe(f"{mirror.remote_checkpoints}/damaged-epoch-0000-1/ckpt.index", b"old")
    for epoch in (1, 2):
        save_checkpoint(local, f"epoch-{epoch:04d}", f"weights-{epoch}".encode())
        mirror.publish()
    assert mirror.stored() == ["epoch-0001", "epoch-0002"]
    save_checkpoint(local, "epoch-0003", b"weights-3")
    save_checkpoint(local, "epoch-0003-batch-0004", b"weights-3b")  # preempted mid-epoch 4
    assert mirror.publish() == ["epoch-0003", "epoch-0003-batch-0004"]
    assert mirror.stored() == ["epoch-0003", "epoch-0003-batch-0004"]
    assert store.fs.exists(f"{mirror.remote_checkpoints}/damaged-epoch-0000-1/ckpt.index")  # never pruned
    assert RunMirror(store.fs, mirror.remote, str(tmp_path / "all"), keep=0).prune() == []


def test_no_secret_reaches_a_file_in_the_store_or_a_message(store, tmp_path):
    local = tmp_path / "local"
    save_checkpoint(local, "epoch-0001", b"weights-1")
    (local / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (local / "config.yaml").write_text("trainer: {}\n")
    mirror = mirror_of(store, local)
    mirror.publish()
    assert store.fs.storage_options["secret_token"] == SECRET  # the store has it, for the filesystem
    root = store.get_localized_path(store.prefix_path)
    written = store.fs.find(root)
    assert len(written) == 6
    for path in written:
        assert SECRET.encode() not in store.fs.cat(path), path
    assert SECRET not in repr(mirror) and SECRET not in repr(store)


def test_a_ranks_local_folder_is_new_and_only_the_folders_of_provably_gone_processes_go(tmp_path):
    """Removed: a folder of this host and boot, this user's, whose process is not running. Kept: a live process's,
    another host's or boot's (a shared or persistent temporary folder), a link, a name that is not a pid."""
    import subprocess
    import sys

    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    here = f"hvdkeras-run-{publish._this_boot()}"
    dead = tmp_path / f"{here}-{gone}-abc"
    alive = tmp_path / f"{here}-{os.getpid()}-def"
    other_boot = tmp_path / f"hvdkeras-run-0123456789ab-{gone}-ghi"
    other = tmp_path / f"{here}-notapid"
    for folder in (dead, alive, other_boot, other):
        (folder / "checkpoints").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / f"{here}-{gone}-link"
    link.symlink_to(elsewhere)
    made = publish.local_folder(str(tmp_path))
    assert os.path.basename(made).startswith(f"{here}-{os.getpid()}-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [alive.name, other_boot.name, other.name, link.name, "elsewhere", os.path.basename(made)])


@pytest.mark.parametrize("listed", ["../../outside", "/abs/path", "a/../../b", "./ckpt.index", "a//b"])
def test_a_manifest_listing_a_path_outside_its_checkpoint_is_not_trusted_nor_followed(store, tmp_path, listed):
    mirror = mirror_of(store, tmp_path / "local")
    save_checkpoint(tmp_path / "local", "epoch-0001", b"weights-1")
    mirror.publish()
    folder = f"{mirror.remote_checkpoints}/epoch-0001"
    manifest = json.loads(store.fs.cat(f"{folder}/manifest.json"))
    manifest["files"][listed] = {"size": 9, "sha256": "0" * 64}
    store.fs.pipe(f"{folder}/manifest.json", json.dumps(manifest).encode())
    assert publish.problem(store.fs, folder) == f"manifest.json lists {listed!r}, a path outside its checkpoint"
    fetched = RunMirror(store.fs, remote_of(store), str(tmp_path / "again"), keep=2)
    warned = []
    assert fetched.fetch(warn=warned.append) is None
    assert "a path outside its checkpoint" in warned[0]
    assert not (tmp_path / "outside").exists() and not os.path.exists("/abs/path")


def follow(mirror, local, box):
    """The checkpoint callback's file as rank 0 places it, followed with the callback's best score (``box[0]``)."""
    path = os.path.join(str(local), publish.BEST_DIR, "model.keras")
    mirror.follow_best(path, lambda: box[0])
    return path


def test_the_best_model_goes_to_the_store_record_last_and_only_when_it_changed(store, tmp_path, monkeypatch):
    local, box = tmp_path / "local", [0.75]
    mirror = mirror_of(store, local)
    path = follow(mirror, local, box)
    mirror.publish()
    assert not store.fs.exists(mirror.remote_best)  # the callback has saved nothing yet
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"best-after-epoch-1")
    order = []
    put = store.fs.put_file
    monkeypatch.setattr(store.fs, "put_file", lambda src, dst, **kw: (order.append(os.path.basename(src)),
                                                                      put(src, dst, **kw))[1])
    mirror.publish()
    assert order[0] == "model.keras" and order[1].endswith(".json")  # the file, then the record naming it
    record = json.loads(store.fs.cat(f"{mirror.remote_best}/best.json"))
    assert record["file"] == "model.keras" and record["score"] == 0.75 and record["size"] == 18
    order.clear()
    mirror.publish()
    assert order == []  # not saved again since: not sent again


@pytest.mark.parametrize("score", [0.25, float("inf"), "not a number"])
def test_a_resumed_run_gets_the_best_model_back_with_its_score(store, tmp_path, score):
    first, box = mirror_of(store, tmp_path / "first"), [score]
    path = follow(first, tmp_path / "first", box)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"the best model")
    first.publish()

    again = mirror_of(store, tmp_path / "again")  # the next start: a new local folder, nothing in it
    fetched_to = follow(again, tmp_path / "again", [None])
    fetched, got = again.fetch_best()
    assert fetched and open(fetched_to, "rb").read() == b"the best model"
    assert got == (0.25 if score == 0.25 else None)  # a score that is no finite number is not restored
    assert not [n for n in os.listdir(os.path.dirname(fetched_to)) if "fetching" in n]


@pytest.mark.parametrize("damage, line", [
    ("changed", "checkpoint_callback/model.keras does not match best.json"),
    ("missing", "checkpoint_callback/model.keras is missing"),
    ("unreadable", "checkpoint_callback/best.json is unreadable (JSONDecodeError)"),
    ("another file", "checkpoint_callback/best.json does not record 'model.keras'"),
])
def test_a_best_model_that_does_not_match_its_record_is_one_line_and_not_fetched(store, tmp_path, damage, line):
    first = mirror_of(store, tmp_path / "first")
    path = follow(first, tmp_path / "first", [0.5])
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"the best model")
    first.publish()
    stored = f"{first.remote_best}/model.keras"
    if damage == "changed":
        store.fs.pipe(stored, b"an upload cut")
    elif damage == "missing":
        store.fs.rm(stored)
    elif damage == "unreadable":
        store.fs.pipe(f"{first.remote_best}/best.json", b'{"file": ')
    else:
        store.fs.pipe(f"{first.remote_best}/best.json", json.dumps({"file": "weights.h5"}).encode())

    again, warned = mirror_of(store, tmp_path / "again"), []
    fetched_to = follow(again, tmp_path / "again", [None])
    assert again.fetch_best(warn=warned.append) == (False, None)
    assert len(warned) == 1 and line in warned[0] and "\n" not in warned[0], warned
    assert not os.path.exists(fetched_to)
    assert not os.listdir(os.path.dirname(fetched_to)) if os.path.isdir(os.path.dirname(fetched_to)) else True

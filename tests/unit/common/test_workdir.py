"""hvdkeras.common.workdir: a run's file names, the atomic write, the resolved config on disk and metrics.jsonl."""
import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from hvdkeras import config as config_lib
from hvdkeras.common import workdir, workdir_guard
from hvdkeras.common.errors import SetupError
from tests.unit.common import killed_writer
from tests.unit.helpers import REPO, config_file


def test_the_files_of_a_run():
    files = workdir.Workdir("/runs/x")
    assert files.config == "/runs/x/config.yaml" == os.path.join("/runs/x", workdir.CONFIG_FILE)
    assert files.metrics == "/runs/x/metrics.jsonl" == os.path.join("/runs/x", workdir.METRICS_FILE)
    assert files.checkpoints == "/runs/x/checkpoints" and files.tensorboard == "/runs/x/tensorboard"
    assert files.estimator == "/runs/x/estimator" and files.report == "/runs/x/report.png"


def test_atomic_save_failure_leaves_previous_file(tmp_path):
    target = tmp_path / "model.h5"
    target.write_text("old")

    def half_then_crash(tmp):
        with open(tmp, "w") as f:
            f.write("partial")
        raise OSError("disk full")

    with pytest.raises(OSError):
        workdir.atomic_save(str(target), half_then_crash)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["model.h5"]


def test_atomic_save_replaces_a_file_or_a_folder_whole(tmp_path):
    workdir.atomic_write(str(tmp_path / "a.txt"), "one")
    workdir.atomic_write(str(tmp_path / "a.txt"), "two")
    assert (tmp_path / "a.txt").read_text() == "two"

    def folder(files):
        def save(tmp):
            os.makedirs(tmp)
            for name in files:
                (open(os.path.join(tmp, name), "w")).close()
        return save

    workdir.atomic_save(str(tmp_path / "d"), folder(["x", "y"]))
    workdir.atomic_save(str(tmp_path / "d"), folder(["z"]))
    assert os.listdir(tmp_path / "d") == ["z"]
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "d"]  # no temporary names left


def _read(kind, path):
    """What a target of ``kind`` at ``path`` holds: its text, its files' texts, or None when it is missing."""
    if kind == "file":
        return path.read_text() if path.exists() else None
    if kind == "folder":
        return {p.name: p.read_text() for p in path.iterdir()} if path.is_dir() else None
    files = {p.name: p.read_text() for p in sorted(path.parent.glob(path.name + ".*"))}
    pointer = path.parent / "checkpoint"  # TensorFlow's: names the prefix, which must be this folder's
    if pointer.exists():
        named = pointer.read_text().split('"')[1]
        files["checkpoint"] = os.path.basename(named) if os.path.dirname(named) in ("", str(path.parent)) else named
    return files or None


def _staging_left(root):
    return [os.path.relpath(os.path.join(dirpath, name), root) for dirpath, dirs, files in os.walk(root)
            for name in dirs + files if workdir.is_staging(name)]


# Where each kind of target lives in a workdir: the config (a file at its top), the export's SavedModel (a folder
# in export/, its old version replaced) and a weights prefix a ModelCheckpoint writes at its top.
TARGETS = {"file": "config.yaml", "folder": "export/saved_model", "prefix": "weights"}


@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_a_writer_killed_at_any_step_leaves_the_old_version_or_the_new_whole_once_the_next_job_starts(tmp_path,
                                                                                                      kind):
    """A writer SIGKILLed inside ``atomic_save`` (tests/unit/common/killed_writer.py), at each step of the write, then
    the next job's start on the workdir (its claim, then the staging removed): no staging is left anywhere, and
    the target holds the old version whole before the write committed, the new one whole from then on."""
    procs = {}
    for step in killed_writer.STEPS:  # each step in a workdir of its own, the writers side by side
        root = tmp_path / step
        target = root / TARGETS[kind]
        target.parent.mkdir(parents=True)
        killed_writer.write(kind, str(target), "old")
        procs[step] = subprocess.Popen([sys.executable, "-m", "tests.unit.common.killed_writer", kind, step,
                                        str(target)], cwd=REPO, stderr=subprocess.PIPE, text=True)
    old, new = _read_versions(tmp_path, kind)
    for step, proc in procs.items():
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, err
        root = tmp_path / step
        target = root / TARGETS[kind]
        assert _staging_left(root), step  # the kill left its staging folder
        claim = workdir_guard.claim(str(root))
        try:
            removed = workdir_guard.remove_staging(str(root), claim)
        finally:
            claim.release()
        assert removed and _staging_left(root) == [], step
        committed = killed_writer.STEPS.index(step) >= killed_writer.STEPS.index("after-commit")
        assert _read(kind, target) == (new if committed else old), step


def _read_versions(tmp_path, kind):
    """The old and the new version of a target of ``kind``, as :func:`_read` gives them."""
    versions = []
    for text in ("old", killed_writer.NEW):
        path = tmp_path / "versions" / text / TARGETS[kind]
        path.parent.mkdir(parents=True)
        killed_writer.write(kind, str(path), text)
        versions.append(_read(kind, path))
    return versions


def test_a_staging_folder_older_than_the_save_that_landed_since_is_dropped_not_finished(tmp_path):
    """A committed leftover that a later save of the same target overtook is removed; what landed stays."""
    leftover = tmp_path / ".saving-abc"
    leftover.mkdir()
    (leftover / "config.yaml").write_text("older")
    (leftover / ".committed").write_text("config.yaml")
    os.utime(leftover / ".committed", ns=(1, 1))
    workdir.atomic_write(str(tmp_path / "config.yaml"), "newer")
    assert workdir.remove_staging(str(tmp_path)) == [".saving-abc"]
    assert os.listdir(tmp_path) == ["config.yaml"] and (tmp_path / "config.yaml").read_text() == "newer"


@pytest.mark.parametrize("marker", ["../outside", "/etc/passwd", ".", "", ".saving-x", b"\xff\xfe"])
def test_a_leftovers_marker_naming_no_plain_target_is_never_followed(tmp_path, marker):
    leftover = tmp_path / "w" / ".saving-abc"
    leftover.mkdir(parents=True)
    (leftover / "outside").write_text("planted")
    (leftover / ".committed").write_bytes(marker if isinstance(marker, bytes) else marker.encode())
    assert workdir.remove_staging(str(tmp_path / "w")) == [".saving-abc"]
    assert os.listdir(tmp_path) == ["w"] and os.listdir(tmp_path / "w") == []


def test_staging_is_cleared_in_every_place_a_write_stages_in_and_only_under_a_held_claim(tmp_path):
    root = tmp_path / "w"
    places = ["", "checkpoints", "export", "previous", "previous/20260101-000000",
              "previous/20260101-000000/checkpoints", "previous/20260101-000000/export"]
    for place in places:
        (root / place / ".saving-x1" / "epoch-0001").mkdir(parents=True)
        (root / place / ".deleting-x2").mkdir()
    (root / "checkpoints" / "epoch-0001").mkdir()
    (root / "tensorboard" / ".saving-not-ours").mkdir(parents=True)  # TensorFlow's folder: no atomic write there
    other_job = workdir_guard.Claim(str(root), None)  # a later rank 0 of the job that holds the workdir
    assert workdir_guard.remove_staging(str(root), other_job) == []
    assert len(_staging_left(root)) == 2 * len(places) + 1
    claim = workdir_guard.claim(str(root))
    try:
        removed = workdir_guard.remove_staging(str(root), claim)
    finally:
        claim.release()
    assert sorted(os.path.relpath(p, root) for p in removed) == sorted(
        os.path.normpath(os.path.join(place, name)) for place in places for name in (".saving-x1", ".deleting-x2"))
    assert _staging_left(root) == [os.path.join("tensorboard", ".saving-not-ours")]
    assert os.listdir(root / "checkpoints") == ["epoch-0001"]


def test_saved_config_round_trips(tmp_path):
    cfg = config_lib.load(config_file("digits.yaml"), ["schedule.boundaries=[5]"])
    out = tmp_path / "config.yaml"
    workdir.save_config(cfg, str(out))
    again = config_lib.from_dict(yaml.safe_load(out.read_text()), source=str(out))
    assert again == cfg
    assert os.listdir(tmp_path) == ["config.yaml"]  # no temporary file left


def test_read_metrics_skips_lines_that_are_not_records(tmp_path):
    path = str(tmp_path / "metrics.jsonl")
    assert workdir.read_metrics_counting(path) == ([], 0)  # a missing file has no records
    workdir.append_metrics(path, {"epoch": 1, "loss": 0.5})
    workdir.append_metrics(path, {"epoch": 2, "loss": 0.4})
    with open(path, "a") as f:
        f.write("\n[1, 2]\n{\"epoch\": 3, \"lo")  # a blank line, a non-object and a line cut by a crash
    assert workdir.read_metrics_counting(path) == ([{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.4}], 2)
    assert workdir.read_metrics(path) == [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.4}]


# What a crash while a line is appended can leave: a line cut short, then bytes that are not UTF-8.
TORN = b'{"epoch": 7, "bogus": \ngarbage\x00\xff\n'


def test_a_torn_record_of_bytes_that_are_not_utf8_is_a_skipped_line_and_resume_drops_it(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"epoch": e}) + "\n" for e in (1, 2)))
    with open(path, "ab") as f:
        f.write(TORN + b"[" * 100000 + b"\n")  # and a line nested past the JSON reader's depth
    assert workdir.read_metrics_counting(str(path)) == ([{"epoch": 1}, {"epoch": 2}], 3)
    workdir.keep_metrics_through(str(path), 2)
    assert path.read_bytes() == b'{"epoch": 1}\n{"epoch": 2}\n'


def test_keep_metrics_through_drops_later_epochs_and_broken_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"epoch": e}) + "\n" for e in (1, 2, 3)) + "{\"epoch\": 4,")
    workdir.keep_metrics_through(str(path), 2)
    assert path.read_text() == '{"epoch": 1}\n{"epoch": 2}\n'
    workdir.keep_metrics_through(str(path), 5)  # nothing to drop: unchanged
    assert path.read_text() == '{"epoch": 1}\n{"epoch": 2}\n'
    assert os.listdir(tmp_path) == ["metrics.jsonl"]


def test_check_writable_accepts_a_new_folder_and_creates_nothing(tmp_path):
    target = tmp_path / "runs" / "job"
    workdir.check_writable(str(target))
    assert os.listdir(tmp_path) == []  # a run that then fails on its config leaves no empty workdir


def test_check_writable_checks_the_folder_a_new_workdir_goes_in(tmp_path, monkeypatch):
    (tmp_path / "runs").write_text("a file where the workdir's parent should be")
    with pytest.raises(SetupError, match=r"^cannot create --workdir .*job: .*runs is a file, not a folder"):
        workdir.check_writable(str(tmp_path / "runs" / "job"))
    probed = []
    real = workdir.tempfile.mkstemp
    monkeypatch.setattr(workdir.tempfile, "mkstemp", lambda **kw: probed.append(kw["dir"]) or real(**kw))
    workdir.check_writable(str(tmp_path / "new" / "job"))
    assert probed == [str(tmp_path)]


def test_check_writable_rejects_a_file_in_one_line(tmp_path):
    path = tmp_path / "job"
    path.write_text("not a folder")
    with pytest.raises(SetupError, match=r"^--workdir .*job is a file, not a folder; pass a folder"):
        workdir.check_writable(str(path))
    os.remove(path)
    os.makedirs(path)
    (path / "checkpoints").write_text("x")
    with pytest.raises(SetupError, match=r"checkpoints is a file, not a folder"):
        workdir.check_writable(str(path))


def test_check_writable_names_the_os_error(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(workdir.tempfile, "mkstemp", refuse)
    with pytest.raises(SetupError, match=r"^cannot write in .* \(Permission denied\); pass a writable --workdir"):
        workdir.check_writable(str(tmp_path))

"""hvdkeras.common.workdir: a run's file names, the atomic write, the resolved config on disk and metrics.jsonl."""
import json
import os

import pytest
import yaml

from hvdkeras import config as config_lib
from hvdkeras.common import workdir
from hvdkeras.common.errors import SetupError
from tests.unit.helpers import config_file


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

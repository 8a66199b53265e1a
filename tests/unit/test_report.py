"""python -m hvdkeras.report: metrics.jsonl -> PNG (no TensorFlow needed)."""
import json
import os
import subprocess
import sys

import pytest

from hvdkeras import report
from hvdkeras.common import command_line
from tests.unit.helpers import REPO

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_report(*args):
    """``python -m hvdkeras.report ARGS`` in this process: its exit status."""
    return command_line.call(report.main, report.FLAGS, ["python -m hvdkeras.report", *args])


def write_jsonl(path, records, extra_lines=()):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        for line in extra_lines:
            f.write(line + "\n")


def synthetic_records():
    """Five epochs; epoch 3 logged twice (the second wins); validation and per-rank rate only sometimes;
    no learning rate at all."""
    records = []
    for epoch in range(1, 6):
        r = {"epoch": epoch, "loss": 2.0 / epoch, "accuracy": 0.5 + 0.08 * epoch,
             "images_per_sec": 1000.0 + epoch, "images_per_sec_per_rank": 500.0 + epoch / 2}
        if epoch % 2 == 0:
            r.update(val_loss=2.2 / epoch, val_accuracy=0.45 + 0.08 * epoch)
        records.append(r)
    records.insert(3, {"epoch": 3, "loss": 99.0, "accuracy": 0.0, "images_per_sec": 1.0})  # repeated, then replaced
    records.append({"epoch": 3, "loss": 0.6, "accuracy": 0.75, "images_per_sec": 1003.0})
    return records


def assert_png(path):
    assert os.path.getsize(path) > 1000
    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    from matplotlib import image

    height, width = image.imread(path).shape[:2]
    assert width >= 800 and height >= 500


def test_last_record_per_epoch_wins_and_order_is_by_epoch():
    kept = report.last_per_epoch(synthetic_records() + [{"loss": 1.0}, {"epoch": "x"}, {"epoch": 2.5}])
    assert [r["epoch"] for r in kept] == [1, 2, 3, 4, 5]
    assert kept[2]["loss"] == 0.6 and "images_per_sec_per_rank" not in kept[2]


def test_plot_metrics_with_duplicates_and_missing_keys(tmp_path):
    out = tmp_path / "nested" / "report.png"
    assert report.plot_metrics(synthetic_records(), str(out), title="synthetic") == str(out)
    assert_png(out)


def test_plot_metrics_one_epoch_and_nan(tmp_path):
    out = tmp_path / "one.png"
    report.plot_metrics([{"epoch": 1, "loss": float("nan"), "lr": 0.1}], str(out))
    assert_png(out)
    with pytest.raises(ValueError, match="no records"):
        report.plot_metrics([{"loss": 1.0}], str(tmp_path / "none.png"))


def test_main_writes_report_png_into_the_workdir(tmp_path, capsys):
    write_jsonl(tmp_path / "metrics.jsonl", synthetic_records(), extra_lines=['{"epoch": 6, "loss": 0.'])
    assert run_report(str(tmp_path)) == 0
    assert_png(tmp_path / "report.png")
    captured = capsys.readouterr()
    assert f"wrote {tmp_path / 'report.png'}" in captured.out
    assert "skipped 1 line(s)" in captured.err  # the cut-off last line
    # --out, and the file itself instead of its workdir
    assert run_report(str(tmp_path / "metrics.jsonl"), "--out", str(tmp_path / "x.png")) == 0
    assert_png(tmp_path / "x.png")
    # flags before the workdir, --name=value, and each run from the defaults (no --out left over from the last)
    assert run_report("--title=again", str(tmp_path)) == 0
    assert f"wrote {tmp_path / 'report.png'}" in capsys.readouterr().out


def test_a_run_a_crash_tore_is_drawn_skipping_the_torn_lines_and_the_staging_folders(tmp_path, capsys):
    from tests.unit.common.test_workdir import TORN

    write_jsonl(tmp_path / "metrics.jsonl", synthetic_records())
    with open(tmp_path / "metrics.jsonl", "ab") as f:
        f.write(TORN)
    (tmp_path / ".saving-x1" / "metrics.jsonl").mkdir(parents=True)  # a killed write's staging, with its name
    assert run_report(str(tmp_path)) == 0
    assert_png(tmp_path / "report.png")
    assert "skipped 2 line(s)" in capsys.readouterr().err


@pytest.mark.parametrize("content", [None, "", "\n\n", '{"loss": 1.0}\n'])
def test_missing_or_empty_metrics_is_one_line_with_status_2(tmp_path, capsys, content):
    path = tmp_path / "metrics.jsonl"
    if content is not None:
        path.write_text(content)
    assert run_report(str(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hvdkeras: error: ")
    assert str(path) in err and "python -m hvdkeras.train --config" in err
    assert not (tmp_path / "report.png").exists()


def test_command_line_error_exit_status(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hvdkeras.report", str(tmp_path / "nowhere")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"hvdkeras: error: {tmp_path / 'nowhere' / 'metrics.jsonl'} does not exist; rank 0 writes it while"
        f" training, e.g. python -m hvdkeras.train --config configs/digits.yaml --workdir {tmp_path / 'nowhere'}")


@pytest.mark.parametrize("args, says", [
    ((), "give one workdir, e.g. python -m hvdkeras.report <workdir>"),
    (("a", "b"), "give one workdir, e.g. python -m hvdkeras.report <workdir> [--out FILE] [--title TEXT];"
                 " received: a b"),
    (("a", "--out"), "Missing value for flag --out; --help lists the flags"),
    (("a", "--bogus=x.png"), "Unknown command line flag 'bogus'; --help lists the flags"),
])
def test_a_bad_command_line_is_one_line_with_status_2(tmp_path, args, says):
    proc = subprocess.run([sys.executable, "-m", "hvdkeras.report", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"hvdkeras: error: {says}")
    assert not os.listdir(tmp_path)


def test_a_png_it_cannot_write_is_one_line_with_status_2(tmp_path, capsys):
    write_jsonl(tmp_path / "metrics.jsonl", synthetic_records())
    (tmp_path / "taken").write_text("a file, not a folder")
    assert run_report(str(tmp_path), "--out", str(tmp_path / "taken" / "report.png")) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("hvdkeras: error: ") and "taken" in line


def test_help_lists_the_flags_with_status_0():
    proc = subprocess.run([sys.executable, "-m", "hvdkeras.report", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("A picture of a run: ``python -m hvdkeras.report <workdir>")
    assert "  --out: PNG to write" in proc.stdout and "  --title: heading" in proc.stdout


def test_importing_the_library_defines_no_flag_of_the_process():
    """hvdkeras.report is a library too: its flags are its own, not absl's process-wide ones."""
    from absl import flags

    assert "out" not in flags.FLAGS and "title" not in flags.FLAGS
    assert {"out", "title"} <= set(report.FLAGS)


def test_a_model_of_several_outputs_gets_each_outputs_loss_and_accuracy_drawn(tmp_path):
    records = [{"epoch": e, "loss": 1.0 / e, "buy_loss": 0.5 / e, "price_loss": 5.0 / e, "val_loss": 1.1 / e,
                "val_buy_loss": 0.6 / e, "val_price_loss": 5.5 / e, "buy_binary_accuracy": 0.8,
                "val_buy_binary_accuracy": 0.7, "price_mae": 2.0, "examples_per_sec": 100.0} for e in (1, 2, 3)]
    panels = {panel: [(key, label) for key, label, _, _ in lines] for panel, _, lines in report.panel_lines(records)}
    assert panels["Loss"] == [
        ("loss", "total, train"), ("val_loss", "total, validation"), ("buy_loss", "buy, train"),
        ("val_buy_loss", "buy, validation"), ("price_loss", "price, train"), ("val_price_loss", "price, validation")]
    assert panels["Accuracy"][2:] == [("buy_binary_accuracy", "buy_binary_accuracy, train"),
                                      ("val_buy_binary_accuracy", "buy_binary_accuracy, validation")]
    colours = {key: colour for _, _, lines in report.panel_lines(records) for key, _, _, colour in lines}
    assert colours["buy_loss"] == colours["val_buy_loss"] != colours["price_loss"]  # one colour per output
    # one output: the panels as before
    single = report.panel_lines(synthetic_records())
    assert [key for key, _, _, _ in single[0][2]] == ["loss", "val_loss"]
    assert [label for _, label, _, _ in single[0][2]] == ["train", "validation"]
    assert_png(report.plot_metrics(records, str(tmp_path / "outputs.png")))


def test_the_throughput_panel_draws_the_tasks_own_unit():
    """Your own data counts examples (examples_per_sec), the built-in image tasks images: the panel follows the
    records, and one rank's per-rank rate is not drawn twice."""
    own = [{"epoch": e, "loss": 1.0 / e, "examples_per_sec": 500.0 + e, "examples_per_sec_per_rank": 250.0 + e,
            "val_examples_per_sec": 1.0} for e in (1, 2)]
    assert report.throughput_unit(own) == "examples"
    title, ylabel, lines = report.panel_lines(own)[-1]
    assert (title, ylabel) == ("Examples per second", "examples/s (training only)")
    assert [key for key, _, _, _ in lines] == ["examples_per_sec", "examples_per_sec_per_rank"]
    assert report.throughput_unit(synthetic_records()) == "images"
    assert report.throughput_unit([{"epoch": 1, "tokens_per_sec": 9e4}]) == "tokens"
    assert report.throughput_unit([{"epoch": 1, "loss": 0.5}]) == "images"  # nothing recorded: the panel says so

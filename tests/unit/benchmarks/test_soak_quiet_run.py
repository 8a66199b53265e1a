"""benchmarks.soak.quiet_run: the quiet run's record, whether an earlier one serves a soak, and the flags around it."""
import os

import pytest
import yaml

from benchmarks.soak import quiet_run


def _finished(out, epochs, config=None):
    """A quiet run of ``epochs`` epochs as a soak leaves it in ``out`` (its record, last checkpoint and config)."""
    os.makedirs(os.path.join(quiet_run.folder(str(out)), "checkpoints", f"epoch-{epochs:04d}"))
    quiet_run.write(str(out), epochs, 0.9861, 35.94)
    with open(os.path.join(quiet_run.folder(str(out)), "config.yaml"), "w") as f:
        yaml.safe_dump(config or {"trainer": {"epochs": epochs}, "model": {"dropout": 0.0}}, f)
    return str(out)


def test_a_finished_quiet_run_of_the_same_epochs_serves_and_its_figures_read_back(tmp_path):
    out = _finished(tmp_path / "q", 40)
    assert quiet_run.problem(out, 40) is None
    assert quiet_run.read(out) == {"epochs": 40, "val_accuracy": 0.9861, "wall_s": 35.9}


def test_what_keeps_a_quiet_run_from_serving_is_one_line_saying_how_to_make_one(tmp_path):
    empty = str(tmp_path / "none")
    assert quiet_run.problem(empty, 40) == (f"{empty} holds no finished quiet run (no quiet.json): python -m"
                                            f" benchmarks.soak --quiet-only --epochs 40 --out {empty} writes one")
    out = _finished(tmp_path / "q", 60)
    said = quiet_run.problem(out, 40)
    assert said.startswith(f"the quiet run in {out} trained 60 epochs, this soak 40: pass --epochs 60, or python -m")
    os.rmdir(os.path.join(quiet_run.folder(out), "checkpoints", "epoch-0060"))
    assert "has no quiet/checkpoints/epoch-0060 (moved or deleted?)" in quiet_run.problem(out, 60)


def test_two_runs_configs_are_compared_setting_by_setting(tmp_path):
    a = quiet_run.folder(_finished(tmp_path / "a", 40))
    b = quiet_run.folder(_finished(tmp_path / "b", 40))
    assert quiet_run.config_differs(a, b) is None
    c = quiet_run.folder(_finished(tmp_path / "c", 40, {"trainer": {"epochs": 40}, "model": {"dropout": 0.5}}))
    assert quiet_run.config_differs(a, c) == "model.dropout: 0.0 there, 0.5 here"
    d = quiet_run.folder(_finished(tmp_path / "d", 40, {"trainer": {"epochs": 40}}))
    assert quiet_run.config_differs(a, d) == "model.dropout: 0.0 there, (unset) here"


def test_the_flags_refuse_a_quiet_run_that_cannot_serve_and_two_choices_at_once(tmp_path, capsys):
    from benchmarks.soak.__main__ import SHORT, parse

    out = _finished(tmp_path / "q", SHORT["epochs"])
    one = ["--kinds", "kill_rank"]  # no full disk: root or not
    assert parse(["--short", "--quiet-from", out, *one]).quiet_from == out
    for argv, said in ((["--quiet-from", out], "--quiet-from: the quiet run in"),  # 600 epochs by default
                       (["--short", "--quiet-from", out, "--no-quiet"], "choose one"),
                       (["--short", "--quiet-only", "--no-quiet"], "choose one")):
        with pytest.raises(SystemExit) as exc:
            parse([*argv, *one])
        assert exc.value.code == 2 and said in capsys.readouterr().err


def test_the_quiet_run_alone_needs_no_root_for_the_full_disk_it_never_fills(monkeypatch):
    from benchmarks.soak.__main__ import parse

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert parse(["--short", "--quiet-only"]).quiet_only

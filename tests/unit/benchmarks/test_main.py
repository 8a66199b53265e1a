"""The bench's command line: which rows a model can have, said instead of silently dropped."""
import pytest

from benchmarks import __main__ as bench_main


def test_recipe_rows_asked_for_with_a_registered_model_are_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        bench_main.main(["--model", "mlp", "--variants", "hvdkeras,horovod"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "variants ['horovod'] build keras.applications models only" in err
    assert "Received: --model mlp" in err


def test_default_rows_with_a_registered_model_say_which_rows_are_left_out(monkeypatch, tmp_path, capsys):
    ran = []
    monkeypatch.setattr(bench_main, "run_rounds", lambda variants, nps, args: ran.append(variants) or {})
    monkeypatch.setattr(bench_main, "summarize", lambda runs, nps: {})
    monkeypatch.setattr(bench_main, "print_table", lambda table, nps: "")
    monkeypatch.setattr(bench_main, "draw", lambda *a: [])
    bench_main.main(["--model", "mlp", "--out", str(tmp_path)])
    assert ran and all(v.startswith("hvdkeras") for v in ran[0])
    out = capsys.readouterr().out
    assert "--model mlp: the hvdkeras rows only" in out and "mwms" in out

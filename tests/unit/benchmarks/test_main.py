"""The bench's command line: the rows it runs and what it writes."""

from benchmarks import __main__ as bench_main


def test_a_registered_model_runs_every_row_the_recipes_included(monkeypatch, tmp_path):
    # the recipes build it as the hvdkeras rows do (benchmarks/recipes/common.py's make_model)
    ran = []
    monkeypatch.setattr(bench_main, "run_rounds", lambda variants, nps, args: ran.append(variants) or {})
    monkeypatch.setattr(bench_main, "summarize", lambda runs, nps: {})
    monkeypatch.setattr(bench_main, "print_table", lambda table, nps: "")
    monkeypatch.setattr(bench_main, "draw", lambda *a: [])
    bench_main.main(["--model", "mlp", "--out", str(tmp_path)])
    assert ran == [list(bench_main.BENCH_VARIANTS)]


def test_the_lab_runs_the_equal_settings_rows_by_default(monkeypatch, tmp_path):
    from benchmarks import link_summary, link_sweep

    ran = []
    monkeypatch.setattr(link_sweep, "run_sweep", lambda variants, rates, args: ran.append(variants) or {})
    monkeypatch.setattr(link_summary, "write_all", lambda sweep, args, out: None)
    bench_main.main(["--hosts", "2", "--link", "gpu", "--out", str(tmp_path)])
    assert ran == [["hvdkeras-fp32", "horovod", "hvdkeras-fp16", "horovod-fp16", "mwms", "ceiling"]]


def test_the_bench_writes_the_paired_ratios_of_rows_that_ran(monkeypatch, tmp_path, capsys):
    import json

    def rounds(variants, nps, args):
        speed = {"hvdkeras": [30.0, 20.0, 31.0], "horovod": [25.0, 20.0, 30.0]}
        return {v: {2: [{"round": i, "images_per_sec": x, "peak_rss_mb": 1.0} for i, x in enumerate(speed[v])]}
                for v in variants}

    monkeypatch.setattr(bench_main, "run_rounds", rounds)
    monkeypatch.setattr(bench_main, "draw", lambda *a: [])
    bench_main.main(["--variants", "hvdkeras,horovod", "--rounds", "3", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "bench.json").read_text())
    (pair,) = saved["pairs"]["2"]
    assert pair["pair"] == "hvdkeras / horovod" and pair["rounds"] == [1.2, 1.0, 31 / 30]
    assert "hvdkeras / horovod" in capsys.readouterr().out

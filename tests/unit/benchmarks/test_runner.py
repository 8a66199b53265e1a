"""benchmarks.runner: the command each row runs."""
import types

import pytest

from benchmarks import runner


def _recorded(monkeypatch):
    commands = []

    def run(cmd, env, timeout):
        commands.append(cmd)
        return 'RESULT {"rank": 0, "images_per_sec": 10.0, "peak_rss_mb": 1.0, "cpu_cores": 1.0}'

    monkeypatch.setattr(runner, "_run", run)
    return commands


def test_horovods_fp16_row_passes_its_examples_flag_and_the_fp32_rows_do_not(monkeypatch, tmp_path):
    commands = _recorded(monkeypatch)
    args = types.SimpleNamespace(model="applications.MobileNet", batch=4, image_size=32, steps=2, timeout=60)
    for variant in ("horovod", "horovod-fp16"):
        runner.run_variant(variant, args, 2, str(tmp_path))
    fp32, fp16 = commands
    assert fp32[-4:] == ["applications.MobileNet", "4", "32", "2"]
    assert fp16[-5:] == ["applications.MobileNet", "4", "32", "2", "--fp16-allreduce"]


def test_hvdkeras_rows_set_the_compression_they_are_named_for():
    assert runner.hvdkeras_sets("hvdkeras-fp32") == ["horovod.compression=none"]
    assert runner.hvdkeras_sets("hvdkeras-fp16") == ["horovod.compression=fp16"]
    assert runner.hvdkeras_sets("hvdkeras") == []
    assert runner.hvdkeras_sets("horovod-fp16") is None


def test_the_ceiling_and_horovod_tuned_run_with_hvdkeras_horovod_settings_and_the_recipe_with_horovods(
        monkeypatch, tmp_path):
    envs = []

    def run(cmd, env, timeout):
        envs.append(dict(env))
        return 'RESULT {"rank": 0, "images_per_sec": 10.0, "peak_rss_mb": 1.0, "cpu_cores": 1.0, "gradient_bytes": 4}'

    monkeypatch.setattr(runner, "_run", run)
    monkeypatch.delenv("HVDKERAS_IDLE_WAIT_MS", raising=False)
    args = types.SimpleNamespace(model="applications.MobileNet", batch=4, image_size=32, steps=2, timeout=60)
    for variant in ("ceiling", "horovod-tuned", "horovod"):
        runner.run_variant(variant, args, 2, str(tmp_path))
    ceiling, tuned, recipe = envs
    assert ceiling["HVDKERAS_IDLE_WAIT_MS"] == tuned["HVDKERAS_IDLE_WAIT_MS"] == "50"  # the idle wait, as hvdkeras
    assert ceiling["BENCH_CPU_BINDING"] == tuned["BENCH_CPU_BINDING"] == "1"
    assert "HVDKERAS_IDLE_WAIT_MS" not in recipe and "BENCH_CPU_BINDING" not in recipe  # Horovod's own defaults


def test_the_lockstep_ceiling_is_the_ceiling_with_its_flag_and_the_same_settings(monkeypatch, tmp_path):
    runs = []

    def run(cmd, env, timeout):
        runs.append((cmd, dict(env)))
        return 'RESULT {"rank": 0, "images_per_sec": 10.0, "peak_rss_mb": 1.0, "cpu_cores": 1.0, "gradient_bytes": 4}'

    monkeypatch.setattr(runner, "_run", run)
    args = types.SimpleNamespace(model="applications.MobileNet", batch=4, image_size=32, steps=2, timeout=60)
    for variant in ("ceiling", "ceiling-lockstep"):
        runner.run_variant(variant, args, 2, str(tmp_path))
    (ceiling, ceiling_env), (lockstep, lockstep_env) = runs
    assert lockstep == ceiling + ["--lockstep"]
    assert lockstep_env == ceiling_env
    assert "ceiling-lockstep" in runner.VARIANTS


def test_rounds_remove_the_jobs_working_directory_on_success_and_on_failure(monkeypatch, tmp_path):
    monkeypatch.setattr(runner.tempfile, "tempdir", str(tmp_path))
    workdirs = []

    def run_variant(variant, args, np_, workdir):
        workdirs.append(workdir)
        (tmp_path / workdir / "run").mkdir(exist_ok=True)  # a job's files
        if variant == "broken":
            raise RuntimeError("the job failed")
        return {"images_per_sec": 1.0}

    monkeypatch.setattr(runner, "run_variant", run_variant)
    args = types.SimpleNamespace(rounds=2)
    assert len(runner.run_rounds(["hvdkeras"], [2], args)["hvdkeras"][2]) == 2
    with pytest.raises(RuntimeError, match="the job failed"):
        runner.run_rounds(["broken"], [2], args)
    assert len(set(workdirs)) == 2 and list(tmp_path.iterdir()) == []

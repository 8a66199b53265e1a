"""hvdkeras.tf_estimator pieces that need no second rank."""
import os
import subprocess
import sys

import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.config import RuntimeConfig
from hvdkeras.runtime import compat
from tests.unit.helpers import REPO

needs_estimator = pytest.mark.skipif(bool(compat.estimator_unavailable()), reason=compat.estimator_unavailable())


@needs_estimator
def test_session_config_pins_the_local_gpu_or_sets_the_thread_budget(hvd_single):
    from hvdkeras.common import horovod_env
    from hvdkeras.tf_estimator import session_config

    gpu = session_config(RuntimeConfig(), num_gpus=4, local_rank=2, local_size=4)
    assert gpu.gpu_options.visible_device_list == "2" and gpu.gpu_options.allow_growth
    cpu = session_config(RuntimeConfig(), num_gpus=0, local_rank=0, local_size=2)
    budget = horovod_env.thread_budget(horovod_env.host_cores(), 2)
    assert (cpu.intra_op_parallelism_threads, cpu.inter_op_parallelism_threads) == (budget.intra_op, budget.inter_op)
    with pytest.raises(SetupError, match="local rank 3 has no GPU"):
        session_config(RuntimeConfig(), num_gpus=2, local_rank=3, local_size=4)


@needs_estimator
def test_learning_rate_tensor_follows_the_schedule_formulas(hvd_single):
    import tensorflow as tf

    from hvdkeras import config as config_lib
    from hvdkeras.tf_estimator import learning_rate_tensor

    cfg = config_lib.load(None, ["schedule.warmup_epochs=2", "schedule.name=step", "schedule.boundaries=[3]",
                                 "trainer.epochs=5"])
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        lr = learning_rate_tensor(cfg, 0.4, steps_per_epoch=10, size=4)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            seen = {}
            for s in (0, 10, 20, 29, 30, 49):
                sess.run(step.assign(s))
                seen[s] = sess.run(lr)
    # warmup from the reference batch's rate (optimizer.learning_rate 0.01, the default) to 0.4
    assert seen[0] == pytest.approx(0.01) and seen[10] == pytest.approx(0.01 + (0.4 - 0.01) * 1 / 2)
    assert seen[20] == pytest.approx(0.4) and seen[29] == pytest.approx(0.4)
    assert seen[30] == pytest.approx(0.04) and seen[49] == pytest.approx(0.04)


@needs_estimator
def test_distributed_optimizer_takes_the_default_horovod_config(hvd_single, monkeypatch):
    """The config's compression (``none``, the default; ``auto`` decided before Horovod sees it) reaches Horovod."""
    import horovod.tensorflow as hvd

    from hvdkeras import tf_estimator as estimator
    from hvdkeras.config import HorovodConfig

    seen = {}
    monkeypatch.setattr(estimator.hvd, "DistributedOptimizer", lambda optimizer, **kwargs: seen.update(kwargs))
    estimator.distributed_optimizer(object(), HorovodConfig())
    assert HorovodConfig().compression == "none"
    assert seen["compression"] is hvd.Compression.none
    estimator.distributed_optimizer(object(), HorovodConfig(compression="auto"))  # one host: none
    assert seen["compression"] is hvd.Compression.none


@needs_estimator  # where tf.estimator is really missing, the test below checks the refusal itself
def test_import_fails_in_one_line_without_tf_estimator():
    code = ("import tensorflow as tf; tf.estimator = None\n"
            "import hvdkeras.training.trainer, hvdkeras.callbacks  # unaffected\n"
            "try:\n    import hvdkeras.tf_estimator\nexcept ImportError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    lines = [line for line in out.stdout.splitlines() if line.startswith("ERR")]
    assert len(lines) == 1, out.stdout + out.stderr
    assert "tf.estimator is not available on this stack" in lines[0] and "STACK=keras2" in lines[0]


@pytest.mark.skipif(not compat.estimator_unavailable(), reason=f"the {compat.STACK} stack has tf.estimator")
def test_stack_without_estimator_refuses_the_estimator_path_in_one_line(tmp_path):
    with pytest.raises(ImportError) as err:
        import hvdkeras.tf_estimator  # noqa: F401
    assert len(str(err.value).splitlines()) == 1 and "keras2 stack" in str(err.value)
    out = subprocess.run([sys.executable, "-m", "hvdkeras.train", "--config",
                          os.path.join(REPO, "configs", "estimator_digits.yaml"), "--workdir", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stdout + out.stderr
    assert lines[0].startswith("hvdkeras: error: tf.estimator is not available") and "keras2 stack" in lines[0]
    assert not (tmp_path / "w").exists()  # refused before anything was written


@needs_estimator
def test_the_old_module_name_still_imports_with_one_warning_line():
    code = ("import warnings; warnings.simplefilter('default')\n"
            "from hvdkeras.estimator import HorovodEstimator\n"
            "import hvdkeras.tf_estimator as new; assert HorovodEstimator is new.HorovodEstimator; print('same')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), cwd=REPO)
    assert out.stdout.strip() == "same", out.stderr[-2000:]
    said = [line for line in out.stderr.splitlines() if "FutureWarning" in line]
    assert len(said) == 1 and "hvdkeras.estimator is now hvdkeras.tf_estimator" in said[0], out.stderr[-2000:]

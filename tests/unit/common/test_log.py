"""hvdkeras.common.log: rank 0 informs, every rank warns, one line each, through Python's logging."""
import logging
import sys

import pytest

from hvdkeras.common import log


@pytest.fixture(autouse=True)
def no_rank_source(monkeypatch):
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "horovod.tensorflow", raising=False)  # as before any hvd.init()
    log.set_rank_source(None)
    yield
    log.set_rank_source(None)


def test_rank_0_informs_on_stdout_and_warns_on_stderr(capsys):
    log.info("trained epochs 1-2 in 3.0s")
    log.warning("checkpoint epoch-0002 is damaged")
    out, err = capsys.readouterr()
    assert out == "[hvdkeras] trained epochs 1-2 in 3.0s\n"
    assert err == "[hvdkeras] warning: checkpoint epoch-0002 is damaged\n"


def test_another_rank_warns_but_does_not_inform(capsys):
    log.set_rank_source(lambda: 1)
    log.info("a line for rank 0 only")
    log.info("rank 1/2: starting fresh", every_rank=True)
    log.warning("seen on rank 1")
    out, err = capsys.readouterr()
    assert out == "[hvdkeras] rank 1/2: starting fresh\n"
    assert err == "[hvdkeras] warning: seen on rank 1\n"


def test_before_horovod_the_launchers_rank_counts(capsys, monkeypatch):
    monkeypatch.setenv("HOROVOD_RANK", "1")
    log.info("not on rank 1")
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("HOROVOD_RANK", "0")
    log.info("on rank 0")
    assert capsys.readouterr().out == "[hvdkeras] on rank 0\n"


def test_once_horovod_is_initialised_its_rank_counts(monkeypatch):
    class Horovod:
        def rank(self):
            return 3

    monkeypatch.setitem(sys.modules, "horovod.tensorflow", Horovod())
    monkeypatch.setenv("HOROVOD_RANK", "0")  # stale after an elastic reset
    assert log.rank() == 3


def test_a_rank_source_that_fails_falls_back_to_the_launchers(capsys):
    def shut_down():
        raise ValueError("Horovod has not been initialized; use hvd.init().")

    log.set_rank_source(shut_down)
    assert log.rank() == 0


def test_the_stop_line_reads_as_the_command_lines_errors(capsys):
    log.set_rank_source(lambda: 1)
    log.stop("preempted at epoch 2, batch 4; checkpoint written: /w/checkpoints/epoch-0001-batch-0004")
    assert capsys.readouterr().err == "hvdkeras: preempted at epoch 2, batch 4; checkpoint written: " \
                                      "/w/checkpoints/epoch-0001-batch-0004\n"


def test_a_user_level_silences_the_information_lines(capsys):
    logger = logging.getLogger("hvdkeras")
    log.info("configures the logger")
    capsys.readouterr()
    logger.setLevel(logging.WARNING)
    try:
        log.info("quiet")
        log.warning("still said")
    finally:
        logger.setLevel(logging.INFO)
    out, err = capsys.readouterr()
    assert out == "" and err == "[hvdkeras] warning: still said\n"

"""hvdkeras.spark.common.runs: a run_id is a name, one fit holds a run, and a run resumes only the job it trained."""
import json
import time

import pytest

from hvdkeras.common.errors import ConfigError, SetupError
from hvdkeras.spark.common import runs
from hvdkeras.spark.common.store import Store


@pytest.fixture
def store(tmp_path):
    return Store.create(str(tmp_path / "store"))


@pytest.mark.parametrize("run_id", ["../../x", "/abs/path", "a/b", "", ".", "..", ".hidden", "a b", "x" * 129, 7,
                                    None, "run\n1", "run1\n"])
def test_a_run_id_that_is_not_a_name_is_one_line(run_id):
    with pytest.raises(ConfigError) as error:
        runs.check_run_id(run_id)
    assert str(error.value) == ("run_id must be a name of letters, digits, '.', '_' and '-' (at most 128, starting"
                                f" with a letter or digit), not a path (Received: run_id={run_id!r})")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("run_id", ["run1", "keras_20261128-120000_ab12cd34", "a.b-c_d", "x" * 128])
def test_a_name_is_a_run_id(run_id):
    assert runs.check_run_id(run_id) == run_id


def test_default_run_ids_are_unique_names():
    made = {runs.new_run_id() for _ in range(200)}
    assert len(made) == 200
    assert all(runs.check_run_id(r) and r.startswith("keras_") for r in made)
    index = runs.fit_data_index("run1")
    assert index.startswith("run1.") and index != runs.fit_data_index("run1")


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def test_a_second_fit_on_a_held_run_is_one_line_naming_the_holder(store):
    clock = Clock()
    first = runs.RunLock(store, "run1", heartbeat_s=3600, clock=clock).acquire()
    try:
        clock.now += 30
        with pytest.raises(SetupError) as error:
            runs.RunLock(store, "run1", heartbeat_s=3600, clock=clock).acquire()
        line = str(error.value)
        assert line.startswith(f"run_id 'run1' is being fitted by another fit ({first.holder}; last seen 30 s ago)")
        assert line.endswith("wait for it to end, or pass another run_id") and "\n" not in line
        runs.RunLock(store, "run2", heartbeat_s=3600, clock=clock).acquire().release()  # another run is free
    finally:
        first.release()
    assert not store.exists(first.path)  # released: removed
    runs.RunLock(store, "run1", heartbeat_s=3600, clock=clock).acquire().release()


def test_a_lock_whose_fit_died_goes_stale_and_is_taken_over_with_a_warning(store, capsys):
    clock = Clock()
    dead = runs.RunLock(store, "run1", heartbeat_s=3600, stale_s=60, clock=clock).acquire()
    dead._stop.set()  # its driver died: no more heartbeats, the lock stays
    clock.now += 61
    taker = runs.RunLock(store, "run1", heartbeat_s=3600, stale_s=60, clock=clock).acquire()
    try:
        assert "taking over a lock last seen more than 60 s ago" in capsys.readouterr().err
        assert json.loads(store.read(taker.path))["token"] == taker.token
        dead.release()  # the old holder, back, does not remove another fit's lock
        assert store.exists(taker.path)
    finally:
        taker.release()


def test_the_heartbeat_keeps_a_long_fit_held(store):
    clock = Clock()
    lock = runs.RunLock(store, "run1", heartbeat_s=0.01, stale_s=60, clock=clock).acquire()
    try:
        clock.now += 50
        deadline = time.monotonic() + 30
        while json.loads(store.read(lock.path))["heartbeat"] != clock.now:  # a heartbeat at the new time
            assert time.monotonic() < deadline, "no heartbeat within 30 s"
            time.sleep(0.01)
        lock._stop.set()  # its last beat: the fit is busy (a beat at the next time would say 0 s ago)
        lock._thread.join()
        clock.now += 50  # 100 s after the start, 50 after the last beat
        with pytest.raises(SetupError, match="last seen 50 s ago"):
            runs.RunLock(store, "run1", clock=clock).acquire()
    finally:
        lock.release()


def _race(store, run_id, fits, clock=None):
    """``fits`` locks on ``run_id`` acquired at one instant (a barrier), each on a thread: (held, refused lines)."""
    import threading

    gate, held, refused = threading.Barrier(fits), [], []

    def take():
        lock = runs.RunLock(store, run_id, heartbeat_s=3600, clock=clock or Clock())
        gate.wait()
        try:
            held.append(lock.acquire())
        except SetupError as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=take) for _ in range(fits)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return held, refused


def test_of_fits_that_take_a_run_at_the_same_instant_exactly_one_holds_it_every_time(store):
    for round_ in range(40):
        held, refused = _race(store, f"run{round_ % 4}", 4)
        assert len(held) == 1 and len(refused) == 3, (round_, refused)
        assert all(line.startswith(f"run_id 'run{round_ % 4}' is being fitted by another fit") for line in refused)
        held[0].release()


def test_of_fits_that_take_over_a_stale_lock_at_the_same_instant_exactly_one_holds_it(store, capsys):
    for round_ in range(20):
        dead = runs.RunLock(store, "run1", heartbeat_s=3600, clock=Clock(1000.0)).acquire()
        dead._stop.set()  # its driver died
        held, refused = _race(store, "run1", 3, clock=Clock(2000.0))
        assert len(held) == 1 and len(refused) == 2, (round_, refused)
        assert [g for g, _ in held[0].generations()] == [held[0].generation]  # the stale generation went
        held[0].release()
    assert capsys.readouterr().err.count("taking over a lock last seen more than 60 s ago") == 20


def test_a_fit_whose_lock_another_fit_took_over_is_told_and_stops_in_one_line(store):
    lost = []
    slow = runs.RunLock(store, "run1", heartbeat_s=0.01, stale_s=60, clock=Clock(1000.0),
                        on_lost=lambda: lost.append(True)).acquire()
    try:
        assert slow.lost_error() is None
        other = runs.RunLock(store, "run1", heartbeat_s=3600, clock=Clock(2000.0)).acquire()  # slow's beat seemed lost
        deadline = time.monotonic() + 30
        while not lost:
            assert time.monotonic() < deadline, "the heartbeat did not see the lock taken over within 30 s"
            time.sleep(0.01)
        line = str(slow.lost_error())
        assert line.startswith(f"run_id 'run1': another fit took this run over while this fit trained ({other.holder};")
        assert line.endswith("fit again once the other ends to resume") and "\n" not in line
        slow.release()  # not its lock any more: the other fit's stays
        assert store.exists(other.path)
        other.release()
    finally:
        slow.release()


def test_the_lost_line_names_the_fit_that_took_over_even_when_its_lock_was_half_written(store):
    # A fresh clone's run saw the takeover between the newer lock's exclusive create and its write, and named "a fit
    # that is taking the run" instead of the fit: the heartbeat now reads a newer lock again while it is not whole.
    lost = []
    slow = runs.RunLock(store, "run1", heartbeat_s=0.01, stale_s=60, clock=Clock(1000.0),
                        on_lost=lambda: lost.append(True)).acquire()
    other = runs.RunLock(store, "run1", heartbeat_s=3600, clock=Clock(2000.0))
    newer = store.get_localized_path(other._lock_path(slow.generation + 1))
    try:
        with open(newer, "x"):  # created, not yet written
            pass
        time.sleep(0.3)  # beats every 0.01 s see the newer lock empty
        with open(newer, "w") as f:
            f.write(other._payload())
        deadline = time.monotonic() + 30
        while not lost:
            assert time.monotonic() < deadline, "the heartbeat did not see the lock taken over within 30 s"
            time.sleep(0.01)
        assert f"({other.holder};" in str(slow.lost_error())
    finally:
        slow.release()


@pytest.fixture(scope="module")
def s3_store():
    """A store in a bucket of moto's S3 server, whose conditional writes are S3's (If-None-Match)."""
    pytest.importorskip("s3fs")
    import boto3

    from tests.harness.s3_server import moto_server

    with moto_server() as endpoint:
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                     region_name="us-east-1").create_bucket(Bucket="locks")
        options = {"key": "testing", "secret": "testing",
                   "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
        yield Store.create("s3://locks/store", storage_options=options)


def test_on_s3_too_of_fits_that_take_a_run_at_once_exactly_one_holds_it(s3_store):
    with pytest.raises(FileExistsError):
        s3_store.create_exclusive(f"{s3_store.get_run_path('x')}/once", "a") or s3_store.create_exclusive(
            f"{s3_store.get_run_path('x')}/once", "b")
    assert s3_store.read(f"{s3_store.get_run_path('x')}/once") == b"a"
    for round_ in range(4):  # each round about 0.7 s against moto: the folder store's test races 40 times
        held, refused = _race(s3_store, "run1", 3)
        assert len(held) == 1 and len(refused) == 2, (round_, refused)
        held[0].release()


def _checkpoint(store, run_id):
    path = store.get_localized_path(store.get_checkpoint_path(run_id)) + "/epoch-0001"
    store.fs.makedirs(path, exist_ok=True)


JOB = {"model": "2 layers, 59 parameters, architecture 1a2b3c4d5e6f", "optimizer": '{"lr": 0.1}', "batch_size": "16"}


def test_a_run_with_checkpoints_resumes_only_the_job_that_trained_them(store):
    assert runs.check_same_job(store, "run1", JOB) == []  # nothing trained yet
    runs.record_job(store, "run1", JOB)
    other = dict(JOB, model="3 layers, 83 parameters, architecture 9f8e7d6c5b4a", batch_size="32")
    assert runs.check_same_job(store, "run1", other) == []  # no checkpoints: nothing to resume
    _checkpoint(store, "run1")
    assert runs.check_same_job(store, "run1", JOB) == []
    with pytest.raises(ConfigError) as error:
        runs.check_same_job(store, "run1", other)
    assert str(error.value) == (
        "run_id 'run1' holds checkpoints trained by another job (model: 2 layers, 59 parameters, architecture"
        " 1a2b3c4d5e6f -> 3 layers, 83 parameters, architecture 9f8e7d6c5b4a; batch_size: 16 -> 32): pass another"
        " run_id to start over, or resume='force' to continue from its weights anyway")
    assert runs.check_same_job(store, "run1", other, resume="force") == [
        "model: 2 layers, 59 parameters, architecture 1a2b3c4d5e6f -> 3 layers, 83 parameters, architecture"
        " 9f8e7d6c5b4a", "batch_size: 16 -> 32"]
    with pytest.raises(ConfigError, match=r"resume must be one of auto, force \(Received: resume='yes'\)"):
        runs.check_same_job(store, "run1", JOB, resume="yes")


def test_a_run_from_before_job_records_resumes(store):
    _checkpoint(store, "old")
    assert runs.check_same_job(store, "old", JOB) == []


def test_a_hostile_lock_in_the_store_is_still_one_line(store):
    lock_path = f"{store.get_run_path('run1')}/{runs.LOCK_FILE}"
    store.write_text(lock_path, json.dumps({"token": "x", "holder": "evil\nline two" + "y" * 500,
                                            "heartbeat": 10 ** 12}))
    with pytest.raises(SetupError) as error:
        runs.RunLock(store, "run1", clock=Clock(10 ** 12 + 5)).acquire()
    assert "\n" not in str(error.value) and "(evil line two" in str(error.value) and len(str(error.value)) < 400
    store.write_text(lock_path, json.dumps({"token": "x", "holder": "h", "heartbeat": "soon"}))  # not a number
    runs.RunLock(store, "run1", heartbeat_s=3600, clock=Clock()).acquire().release()  # stale: taken over


def test_a_store_without_an_exclusive_create_still_locks_and_says_what_it_cannot_promise(store, monkeypatch, capsys):
    from hvdkeras.spark.common.store import ExclusiveCreateError

    def unsupported(path, text):
        raise ExclusiveCreateError("unsupported mode for Arrow filesystem: 'xb'")

    monkeypatch.setattr(store, "create_exclusive", unsupported)
    first = runs.RunLock(store, "run1", heartbeat_s=3600, clock=Clock()).acquire()
    try:
        assert "the store cannot create a file exclusively (unsupported mode for Arrow filesystem: 'xb')" in (
            capsys.readouterr().err)
        with pytest.raises(SetupError, match="is being fitted by another fit"):
            runs.RunLock(store, "run1", heartbeat_s=3600, clock=Clock()).acquire()
    finally:
        first.release()


def test_a_stored_run_names_every_place_of_the_run_and_removes_only_its_own_data(tmp_path):
    store = Store.create(str(tmp_path / "store"))
    run, other = runs.StoredRun(store, "r1"), runs.StoredRun(store, "r2")
    assert run.data_index.startswith("r1.") and run.data_index == run.data_index  # one per fit, kept
    assert run.path == store.get_run_path("r1") and run.folder == str(tmp_path / "store" / "runs" / "r1")
    assert run.checkpoints_shown == str(tmp_path / "store" / "runs" / "r1" / "checkpoints")  # a local store: a path
    for stored in (run, other):
        for path in stored.data_paths():
            store.write_text(f"{path}/part-0.parquet", "rows")
    run.remove_data()
    assert [store.exists(p) for p in run.data_paths()] == [False, False]
    assert [store.exists(p) for p in other.data_paths()] == [True, True]
    with run.lock():
        run.record_job({"model": "m"})
        assert run.check_job({"model": "other"}) == []  # no checkpoint yet: nothing to refuse
        with pytest.raises(SetupError, match=r"^run_id .r1. is being fitted by another fit"):
            other_lock = runs.StoredRun(store, "r1").lock()
            other_lock.acquire()

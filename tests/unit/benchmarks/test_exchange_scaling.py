"""benchmarks.exchange_scaling with the lab and the jobs faked at the module boundary: the host counts' order,
one lab for all counts, the table against the ring model, and the lab torn down on every exit."""
import contextlib
import json
import os
import signal

import pytest

from benchmarks import exchange_scaling as scaling
from benchmarks import runner
from lab import hosts, shaper
from lab import hosts as lab_hosts  # the name the fake up() cannot use: its keyword is `hosts`

RATE = 200_000_000
MB14 = 14_000_000


def test_host_counts_are_distinct_and_2_to_8_in_the_order_given():
    assert scaling.parse_hosts("4, 2,8") == [4, 2, 8]
    for bad in ("", "1,2", "2,9", "2,2", "two"):
        with pytest.raises(ValueError, match=f"from 2 to 8.*Received: {bad!r}"):
            scaling.parse_hosts(bad)


def test_the_ring_model():
    assert scaling.ring_seconds(MB14, 2, RATE) == pytest.approx(0.56)  # each rank sends half twice: all the bytes
    assert scaling.ring_seconds(MB14, 4, RATE) == pytest.approx(0.84)
    assert scaling.ring_seconds(MB14, 8, RATE) == pytest.approx(0.98)


def test_no_count_always_runs_first():
    orders = scaling.round_orders([2, 3, 4], 4)
    assert orders == [[2, 3, 4], [3, 4, 2], [4, 2, 3], [2, 3, 4]]


def _job(seconds, cpu=0.05, grad_bytes=MB14):
    return {"ranks": [{"rank": 0, "exchange_s": seconds - 0.01, "exchange_cpu_s": cpu},
                      {"rank": 1, "exchange_s": seconds, "exchange_cpu_s": cpu / 2}],
            "gradient_bytes": grad_bytes, "machine_busy_cores": 1.0}


def test_the_table_takes_the_slowest_rank_and_compares_the_median_with_the_model():
    rows = scaling.summarize({2: [_job(0.60), _job(0.58), _job(0.70)], 4: [_job(0.84)], 6: []}, RATE)
    assert [r["hosts"] for r in rows] == [2, 4]
    two = rows[0]
    assert (two["median_s"], two["min_s"], two["max_s"]) == (0.60, 0.58, 0.70)
    assert two["model_s"] == pytest.approx(0.56) and two["measured_over_model"] == pytest.approx(0.60 / 0.56)
    assert two["cpu_s"] == 0.05 and two["rounds"] == 3
    text = scaling.format_table(rows, "title")
    assert text.splitlines()[:2] == ["title", scaling.TABLE_HEADER]
    assert text.splitlines()[2].split() == ["2", "14.0", "0.560", "0.600", "0.580-", "0.700", "1.07", "0.050", "3"]


def test_an_unshaped_sweep_has_no_model():
    rows = scaling.summarize({3: [_job(0.05)]}, None)
    assert rows[0]["model_s"] is None and rows[0]["measured_over_model"] is None
    assert scaling.format_table(rows, "t").splitlines()[2].split()[2] == "-"


@pytest.fixture
def fake_lab(monkeypatch):
    """A lab of real HostsInfo/Host records; up/down, the shaper and the exchange jobs recorded instead of run."""
    calls = []
    link = {"rate": "unshaped"}

    def up(tmpdir, hosts=2):
        calls.append(f"up {hosts}")
        return lab_hosts.HostsInfo(str(tmpdir), [lab_hosts.Host(*spec[:3]) for spec in lab_hosts.host_specs(hosts)])

    monkeypatch.setattr(hosts, "can_run", lambda: (True, ""))
    monkeypatch.setattr(hosts, "up", up)
    monkeypatch.setattr(hosts, "down", lambda info=None: calls.append("down"))
    monkeypatch.setattr(hosts, "any_up", lambda: False)

    @contextlib.contextmanager
    def shaped(ends, rate):
        calls.append(f"shape {len(ends)} ends {rate}")
        link["rate"] = rate
        try:
            yield
        finally:
            link["rate"] = "unshaped"
            calls.append("unshape")

    monkeypatch.setattr(shaper, "shaped", shaped)
    monkeypatch.setattr(shaper, "clear", lambda ends: calls.append(f"clear {len(ends)} ends"))

    def run_exchange(args, np_, place, env=None, flags=(), controller="gloo"):
        slots = [int(entry.split(":")[1]) for entry in place.horovodrun_hosts[1].split(",")]
        per_host = slots[0]
        assert place.np == np_ == sum(slots) and place.horovodrun_hosts[1] == ",".join(
            f"198.18.213.{2 + i}:{n}" for i, n in enumerate(slots))  # the first ceil(np_ / k) hosts
        setting = f" {env} {list(flags)} {controller}" if env or flags or controller != "gloo" else ""
        setting += f" {per_host} per host" if per_host > 1 else ""
        calls.append(f"job {np_} at {link['rate']}{setting}")
        # fp16 halves the time; anything else is the default's
        return _job(scaling.ring_seconds(MB14, np_, RATE) * 1.05 * (0.5 if "--fp16-allreduce" in flags else 1))

    monkeypatch.setattr(scaling, "run_exchange", run_exchange)
    return calls


def test_one_lab_of_the_largest_count_all_links_shaped_counts_alternating(fake_lab, tmp_path):
    args = scaling.argparse.Namespace(rounds=2)
    runs = scaling.run_scaling([2, 4, 3], RATE, args, log=lambda line: None)
    assert fake_lab == ["up 4", f"shape 8 ends {RATE}",
                        f"job 2 at {RATE}", f"job 4 at {RATE}", f"job 3 at {RATE}",
                        f"job 4 at {RATE}", f"job 3 at {RATE}", f"job 2 at {RATE}",
                        "unshape", "clear 8 ends", "down"]
    assert [j["round"] for j in runs[3]] == [0, 1]


def test_the_lab_is_torn_down_after_a_failed_job(fake_lab, monkeypatch):
    def fail(args, np_, place, **setting):
        raise RuntimeError("horovodrun ... failed")

    monkeypatch.setattr(scaling, "run_exchange", fail)
    with pytest.raises(RuntimeError, match="failed"):
        scaling.run_scaling([2, 3], RATE, scaling.argparse.Namespace(rounds=1), log=lambda line: None)
    assert fake_lab == ["up 3", f"shape 6 ends {RATE}", "unshape", "clear 6 ends", "down"]


def test_the_lab_is_torn_down_on_sigterm(fake_lab, monkeypatch):
    def terminated(args, np_, place, **setting):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(scaling, "run_exchange", terminated)
    with pytest.raises(SystemExit) as exit_:
        scaling.run_scaling([2], RATE, scaling.argparse.Namespace(rounds=1), log=lambda line: None)
    assert exit_.value.code == 128 + signal.SIGTERM
    assert fake_lab[-3:] == ["unshape", "clear 4 ends", "down"]


def test_the_command_writes_the_table_and_every_job(fake_lab, tmp_path, capsys):
    assert scaling.main(["--hosts", "2,3", "--rounds", "1", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "exchange_scaling.json").read_text())
    assert out["link_bps"] == RATE and out["hosts"] == [2, 3] and len(out["runs"]["3"]) == 1
    assert [round(r["measured_over_model"], 2) for r in out["table"]] == [1.05, 1.05]
    text = (tmp_path / "exchange_scaling.txt").read_text()
    assert "link 200mbit" in text and text in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [(["--hosts", "2,9"], "Received: '2,9'"),
                                           (["--link", "200mb"], "Received: '200mb'"),
                                           (["--rounds", "0"], "Received: --rounds 0"),
                                           (["--variants", "fp32"], "Received: 'fp32'")])
def test_bad_arguments_are_one_line_errors(argv, message, fake_lab, capsys):
    with pytest.raises(SystemExit) as exit_:
        scaling.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert fake_lab == []


def test_it_refuses_to_tear_down_a_lab_another_job_has_up(fake_lab, monkeypatch, capsys):
    monkeypatch.setattr(hosts, "any_up", lambda: True)
    with pytest.raises(SystemExit):
        scaling.main(["--hosts", "2"])
    assert "hosts are up already" in capsys.readouterr().err and fake_lab == []


def test_the_runner_reads_mpiruns_tagged_results():
    out = ('[1,1]<stdout>:RESULT {"rank": 1, "exchange_s": 0.5}[1,0]<stdout>:\n'
           '[1,0]<stdout>:RESULT {"rank": 0, "exchange_s": 0.4}[1,2]<stdout>:RESULT {"rank": 2, "exchange_s": 0.3}\n'
           '[1,3]<stdout>:RESULT \n[1,3]<stdout>:{"rank": 3, "exchange_s": 0.2}\n')
    assert runner._results(out) == [{"rank": 1, "exchange_s": 0.5}, {"rank": 0, "exchange_s": 0.4},
                                    {"rank": 2, "exchange_s": 0.3}]  # a result split by a tag is not read


def test_variants_name_horovods_settings_and_the_recipes_flags():
    assert scaling.parse_variant("default") == scaling.Variant("default")
    assert scaling.parse_variant("fusion=0").env == (("HOROVOD_FUSION_THRESHOLD", "0"),)
    assert scaling.parse_variant("fusion=128").env == (("HOROVOD_FUSION_THRESHOLD", str(128 * 2 ** 20)),)
    both = scaling.parse_variant("fp16+groups=2")
    assert both.flags == ("--fp16-allreduce", "--groups=2") and both.controller == "gloo"
    assert both.name == "fp16+groups=2"
    assert scaling.parse_variant("mpi") == scaling.Variant("mpi", controller="mpi")
    hierarchical = scaling.parse_variant("hierarchical")
    assert hierarchical.env == (("HOROVOD_HIERARCHICAL_ALLREDUCE", "1"),) and hierarchical.controller == "mpi"
    forced = scaling.parse_variant("mpi_alg=ring")
    assert forced.controller == "mpi" and dict(forced.env) == {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                                                               "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"}
    yielding = scaling.parse_variant("mpi_alg=ring+mca:mpi_yield_when_idle=1")
    assert yielding.controller == "mpi" and dict(yielding.env)["OMPI_MCA_mpi_yield_when_idle"] == "1"
    nodes = scaling.parse_variant("hierarchical+per_host=2")
    assert nodes.per_host == 2 and nodes.controller == "mpi" and scaling.parse_variant("fp16").per_host == 1
    for bad in ("fusion", "fusion=x", "groups=-1", "fp16=1", "nccl", "default=1", "mpi_alg=tree", "mpi_alg=4",
                "per_host=0", "per_host", "mca:", "mca:x", "mca:=1"):
        with pytest.raises(ValueError, match=f"default, fusion=MB, fp16, groups=K, mpi, mpi_alg=NAME.*ring.*mca:.*"
                                             f"per_host=K.*Received: {bad!r}"):
            scaling.parse_variant(bad)
    with pytest.raises(ValueError, match="distinct variants.*Received: 'fp16,fp16'"):
        scaling.parse_variants("fp16,fp16")


def test_variants_alternate_within_each_round_and_compare_with_the_first_in_the_same_round(fake_lab):
    variants = scaling.parse_variants("default,fp16")
    runs = scaling.run_scaling([2, 4], RATE, scaling.argparse.Namespace(rounds=2), log=lambda line: None,
                               variants=variants)
    plain, fp16 = f"at {RATE}", f"at {RATE} {{}} ['--fp16-allreduce'] gloo"
    assert fake_lab[2:-3] == [f"job 2 {plain}", f"job 2 {fp16}", f"job 4 {plain}", f"job 4 {fp16}",
                              f"job 4 {fp16}", f"job 4 {plain}", f"job 2 {fp16}", f"job 2 {plain}"]
    assert [(j["variant"], j["round"]) for j in runs[2]] == [("default", 0), ("fp16", 0), ("fp16", 1), ("default", 1)]
    rows = scaling.compare_variants(runs, variants)
    assert [(r["hosts"], r["variant"]) for r in rows] == [(2, "default"), (2, "fp16"), (4, "default"), (4, "fp16")]
    assert rows[1]["over_first"] == [0.5, 0.5] and rows[1]["over_first_median"] == 0.5
    assert rows[0]["over_first"] == [1.0, 1.0]
    assert [r["hosts"] for r in scaling.summarize(runs, RATE)] == [2, 4]  # the first variant's jobs only
    assert scaling.summarize(runs, RATE)[0]["rounds"] == 2
    text = scaling.format_variants(rows, "t").splitlines()
    assert text[1] == scaling.VARIANT_HEADER and text[3].split()[-3:] == ["0.50,", "0.50", "0.50"]


def test_ranks_per_host_put_n_ranks_on_the_first_hosts_k_at_a_time(fake_lab):
    runs = scaling.run_scaling([4, 3], RATE, scaling.argparse.Namespace(rounds=1), log=lambda line: None,
                               variants=scaling.parse_variants("default,mpi+per_host=2"))
    assert fake_lab[2:-3] == [f"job 4 at {RATE}", f"job 4 at {RATE} {{}} [] mpi 2 per host",
                              f"job 3 at {RATE}", f"job 3 at {RATE} {{}} [] mpi 2 per host"]  # hosts a, b (2 + 1)
    assert [j["variant"] for j in runs[3]] == ["default", "mpi+per_host=2"]
    info = lab_hosts.HostsInfo("/t", [lab_hosts.Host(*spec[:3]) for spec in lab_hosts.host_specs(3)])
    assert info.host_list(2, 3) == "198.18.213.2:2,198.18.213.3:1"  # the slots add up to -np, as Gloo starts them all
    assert info.host_list() == "198.18.213.2:1,198.18.213.3:1,198.18.213.4:1"


def test_the_command_writes_the_variants_table(fake_lab, tmp_path, capsys):
    assert scaling.main(["--hosts", "2", "--rounds", "1", "--variants", "default,fp16", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "exchange_scaling.json").read_text())
    assert [v["name"] for v in out["variants"]] == ["default", "fp16"]
    assert [r["over_first_median"] for r in out["settings_table"]] == [1.0, 0.5]
    assert "over default's in the same round" in capsys.readouterr().out


def test_the_runner_reads_every_rank_of_an_exchange_job(monkeypatch):
    out = "\n".join("RESULT " + json.dumps({"rank": r, "exchange_s": 0.5, "exchange_cpu_s": 0.1,
                                           "exchange_walls_s": [0.5], "gradient_bytes": MB14}) for r in (1, 0))
    commands = []
    monkeypatch.setattr(runner, "_run", lambda cmd, env, timeout: commands.append((cmd, env)) or out)
    job = runner.run_exchange(scaling.argparse.Namespace(model="applications.MobileNetV2", image_size=224, steps=10,
                                                         timeout=60), 2)
    assert [r["rank"] for r in job["ranks"]] == [0, 1] and job["gradient_bytes"] == MB14
    cmd, env = commands[0]
    assert cmd[-4:] == ["applications.MobileNetV2", "1", "224", "10"] and "--gloo" in cmd
    assert os.path.basename(cmd[-5]) == "exchange_cost.py" and env["BENCH_CPU_BINDING"] == "1"
    runner.run_exchange(scaling.argparse.Namespace(model="m", image_size=32, steps=1, timeout=60), 2,
                        env={"HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}, flags=("--groups=2",), controller="mpi")
    cmd, env = commands[1]
    assert cmd[-1] == "--groups=2" and "--mpi" in cmd and "--gloo" not in cmd
    assert env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1" and env["BENCH_CPU_BINDING"] == "1"
    with pytest.raises(RuntimeError, match="1 results for 3 processes"):
        monkeypatch.setattr(runner, "_run", lambda cmd, env, timeout: out.splitlines()[0])
        runner.run_exchange(scaling.argparse.Namespace(model="m", image_size=32, steps=1, timeout=60), 3)

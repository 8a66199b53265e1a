"""What the launchers render from hostile hosts, paths, --set values and images: the exact tokens, or one line.

Each property generates values a user or a hosts file could give (tests/harness/hostile.py) and asserts that the
rendered horovodrun or mpirun command splits back (``shlex.split``) into exactly the tokens given, that the sbatch
script's command does too and its ``#SBATCH`` lines carry nothing else, that the Kubernetes YAML parses back to the
values given, or that the input is refused in one line. Nothing may raise anything else.
"""
import re
import shlex

import yaml
from hypothesis import given
from hypothesis import strategies as st

from hvdkeras import config as config_lib
from hvdkeras import discover_hosts, launch
from hvdkeras.common.errors import LaunchError
from hvdkeras.launch.commands import TRAIN_MODULE, mpirun_flags
from hvdkeras.launch.kubernetes import KubernetesOptions, kubernetes_manifest
from hvdkeras.launch.slurm import slurm_script
from tests.harness.hostile import PROPERTY, host_entry, hostile_text, one_line
from tests.unit.helpers import config_file

CONFIG = config_lib.load(config_file("digits.yaml"), [])
# The training command's arguments as the dry run builds them: --config, --set, --workdir, each value hostile.
train_args = st.tuples(hostile_text, st.lists(hostile_text, max_size=3), hostile_text).map(
    lambda t: ["--config", t[0] or "c.yaml"] + [a for s in t[1] for a in ("--set", s)] + ["--workdir", t[2] or "w"])
hosts_text = st.lists(host_entry, min_size=1, max_size=3).map(",".join)


def shell_words(command):
    """``command``'s words as a POSIX shell reads them, its operators (``;``, ``&``, ``|``, ``(``, ``<``...) as words
    of their own: a command that carries one outside quotes does not split back into the tokens given."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


@PROPERTY
@given(hosts_text, train_args)
def test_horovodrun_and_mpirun_commands_split_into_the_tokens_given(hosts, args):
    p = one_line(lambda: launch.plan(CONFIG, None, hosts, cores_per_host=4, train_args=args))
    if isinstance(p, str):
        return
    h = ",".join(f"{x.name}:{x.slots}" for x in p.hosts)
    assert re.fullmatch(r"[A-Za-z0-9.:,%_-]+", h), h  # nothing a shell or ssh reads specially
    for launcher, first in (("horovodrun", ["--gloo"]), ("mpirun", list(mpirun_flags()))):
        try:
            command = launch.render_command(p, launcher)
        except LaunchError as exc:  # a plan that parsed is refused only for an IPv6 host, which -H cannot carry
            assert "\n" not in str(exc) and "cannot carry an IPv6 address" in str(exc), str(exc)
            continue
        assert shell_words(command) == [launcher, "-np", str(p.np), "-H", h, *first, *TRAIN_MODULE, *args]


@PROPERTY
@given(st.lists(st.tuples(host_entry, st.booleans()), min_size=1, max_size=4))
def test_discovery_prints_only_checked_lines(entries):
    text = "".join(f"{e}\n" + ("# a comment\n" if c else "") for e, c in entries)
    errors = []

    class Sink:
        def write(self, s):
            errors.append(s)

    good = discover_hosts.checked_lines(text, "hosts file h.txt", errors=Sink())
    for line in good:
        assert re.fullmatch(r"[A-Za-z0-9.-]+(:[0-9]+)?", line), line  # nothing a shell or ssh reads specially
    assert all(e == "\n" or e.startswith("[hvdkeras] warning: left out: hosts file h.txt: ")
               for e in errors), errors


@PROPERTY
@given(train_args, st.booleans(), st.booleans())
def test_the_sbatch_scripts_command_splits_back_and_its_directives_carry_nothing_else(args, srun, preemption):
    config = config_lib.load(config_file("digits.yaml"), [f"checkpoint.preemption={str(preemption).lower()}"])
    p = launch.plan(config, 4, "node-1:2,node-2:2", cores_per_host=4, train_args=args)
    script = slurm_script(p, srun=srun)
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            assert re.fullmatch(r"#SBATCH --[a-z-]+(=[A-Za-z0-9:@%._,=/-]+)?", line), line
    first = ["srun", "--mpi=pmix"] if srun else ["horovodrun", "-np", "4", "-H", "${HOSTS}", "--gloo"]
    if preemption:  # slurm_requeue.sh: the command runs in the background, its pid kept
        begin = script.index(f"\n  {first[0]} ") + 3
        run = script[begin:script.rindex(" &\n  HVD=$!\n")]
    else:
        run = script[script.index("\nexec ") + len("\nexec "):]
    assert shell_words(run) == first + ["python" if srun else TRAIN_MODULE[0], *TRAIN_MODULE[1:], *args]


@PROPERTY
@given(train_args, st.one_of(hostile_text, st.just("registry.example.com:5000/team/hvdkeras:1.0")))
def test_the_kubernetes_manifest_parses_back_to_the_values_given(args, image):
    p = launch.plan(CONFIG, 4, "node-1:2,node-2:2", cores_per_host=4, train_args=args)
    text = one_line(lambda: kubernetes_manifest(p, image, KubernetesOptions(api="mpijob")))
    if not text.startswith("# hvdkeras"):  # refused: its one line
        return
    header, _, body = text.partition("\napiVersion")
    assert all(line.startswith("#") for line in header.splitlines())
    manifest, policy = yaml.safe_load_all("apiVersion" + body)
    assert policy["kind"] == "NetworkPolicy"
    (launcher,) = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    (worker,) = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert launcher["image"] == worker["image"] == image
    assert launcher["args"][-len(args):] == args
    assert launcher["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert worker["securityContext"]["allowPrivilegeEscalation"] is False

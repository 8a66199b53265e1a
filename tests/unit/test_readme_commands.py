"""Every command the README shows in a fenced block parses: its make targets, modules, scripts and flags exist,
and the config keys of a training command are keys (the config loads with its --set overrides)."""
import os
import re
import shlex

import pytest

from hvdkeras import config as config_lib
from tests.unit.helpers import REPO


def _commands():
    """Each command line of README.md's fenced blocks (continuations joined, comments dropped)."""
    text = open(os.path.join(REPO, "README.md")).read()
    commands = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" # ")[0].strip()
            if line and not line.startswith("#") and re.match(r"^(\S*/)?(make|horovodrun|mpirun|python)\b", line):
                commands.append(line)
    return commands


COMMANDS = _commands()


def _train_flags():
    from absl import flags

    from hvdkeras import train  # noqa: F401  (defines its absl flags)

    return set(flags.FLAGS)


def test_the_readme_shows_commands():
    assert any("hvdkeras.train" in c for c in COMMANDS) and any(c.startswith("make") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_readme_command_parses(command):
    words = shlex.split(command)
    if words[0] == "make":
        makefile = open(os.path.join(REPO, "Makefile")).read()
        for target in (w for w in words[1:] if "=" not in w):
            assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), f"no make target {target}: {command}"
        return
    if "-m" in words:
        module = words[words.index("-m") + 1]
        path = os.path.join(REPO, *module.split("."))
        assert os.path.exists(path + ".py") or os.path.exists(os.path.join(path, "__main__.py")), command
        args = words[words.index("-m") + 2:]
    else:
        script = next(w for w in words if w.endswith(".py"))
        assert os.path.exists(os.path.join(REPO, script)), command
        return
    if module != "hvdkeras.train":
        return
    known = _train_flags()
    for arg in args:
        if arg.startswith("--"):
            assert arg[2:].split("=")[0] in known, f"--{arg[2:]} is not a flag of hvdkeras.train: {command}"
    config = os.path.join(REPO, args[args.index("--config") + 1])
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    config_lib.load(config, sets)  # every key exists, every value fits

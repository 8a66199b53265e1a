"""Every reference README.md, docs/*.md and the records in docs/records/ make is true: each command (make targets,
modules, scripts, their flags, a training command's config keys), each file path, each ``file::test`` name, each
``HVDKERAS_*`` variable and each link and anchor; and the README's own commands run one after another in one clone.
A stale one fails here. The pages a user reads say how to do something; how it was measured (runs labelled by
session or fresh clone, issue numbers, measurement histories) lives in docs/records/."""
import glob
import os
import re
import shlex
import subprocess

import pytest

from hvdkeras import config as config_lib
from tests.unit.docs.test_references import TOOL
from tests.unit.helpers import REPO

# The pages a user reads, and the records of how things were measured (docs/records/, indexed by its README.md).
DOCS = ["README.md", "SECURITY.md"] + sorted(os.path.relpath(p, REPO)
                                             for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
RECORDS = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "records", "*.md")))
RECORDS_INDEX = "docs/records/README.md"
TEXTS = {name: open(os.path.join(REPO, name)).read() for name in DOCS + RECORDS}
# The folders and files a path in the docs may start with (runs/, /tmp/ and <workdir>/ are made at run time).
TOP = ("hvdkeras/", "tests/", "tools/", "benchmarks/", "lab/", "configs/", "examples/", "stacks/", "docs/")
ROOT_FILES = ("Makefile", "pyproject.toml", "README.md", "CHANGELOG.md")
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+ )*(?:\S*/)?(make|horovodrun|mpirun|python|spark-submit|hvdkeras-[a-z-]+)"
                     r"(?:\s|$)")


def _fenced(text):
    """The lines of ``text``'s fenced blocks, continuations joined."""
    lines = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        lines += re.sub(r"\\\n\s*", " ", block).splitlines()
    return lines


def _spans(text):
    """The inline code spans of ``text`` outside fenced blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", prose)


def _commands():
    """(doc, command) for each command line of a fenced block, and each inline span that is a whole command."""
    found = []
    for name, text in TEXTS.items():
        for line in _fenced(text):
            line = line.split(" # ")[0].strip()
            if COMMAND.match(line):
                found.append((name, line))
        for span in _spans(text):
            if len(span.split()) >= 3 and COMMAND.match(span) and "..." not in span and not re.search(r"[<\[]", span):
                found.append((name, span))
    return found


COMMANDS = _commands()


def _flags_by_module():
    """``{module: {--flag, ...}}`` for every command of docs/commands.md (absl's --noflag for booleans too)."""
    flags = {}
    for command in TOOL.commands():
        names = set()
        for option in command.options:
            for name in re.split(r",\s*", option.name.split("=")[0].split(" ")[0]):
                names.add(name)
                if option.default == "" and "=" not in option.name and name.startswith("--"):
                    names.add("--no" + name[2:])
        flags[command.run.split()[-1]] = names
    return flags


FLAGS = _flags_by_module()


def test_the_docs_show_commands():
    assert any("hvdkeras.train" in c for _, c in COMMANDS) and any(c.startswith("make") for _, c in COMMANDS)
    assert {doc for doc, _ in COMMANDS} >= {"README.md", "docs/launching.md", "docs/config.md"}


def _check_python(words, command):
    """``words`` start at ``python``: the module or script exists; a module of docs/commands.md gets only its flags;
    a training command's config loads with its --set overrides."""
    if words[1:2] == ["-c"]:
        return
    if "-m" not in words:
        script = next(w for w in words if w.endswith(".py"))
        assert os.path.exists(os.path.join(REPO, script)), f"no script {script}: {command}"
        return
    module = words[words.index("-m") + 1]
    if module.split(".")[0] not in ("hvdkeras", "benchmarks", "lab", "tools", "tests"):
        return  # another package's (python -m build, pip, pytest)
    path = os.path.join(REPO, *module.split("."))
    assert os.path.exists(path + ".py") or os.path.exists(os.path.join(path, "__main__.py")), f"no module: {command}"
    args = words[words.index("-m") + 2:]
    if module not in FLAGS:
        return
    for arg in args:
        if arg.startswith("-"):
            assert arg.split("=")[0] in FLAGS[module], f"{arg} is not a flag of python -m {module}: {command}"
    if module == "hvdkeras.train" and "--config" in args:
        config = args[args.index("--config") + 1]
        if config.isupper():
            return  # a placeholder: --config FILE
        if os.path.exists(os.path.join(REPO, config)):
            config = os.path.join(REPO, config)
        sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
        return config_lib.load(config, sets)  # the file or shipped name exists, every key exists, every value fits
    return None


SPARK_SUBMIT_FLAGS = {"--master", "--deploy-mode", "--archives", "--conf", "--py-files", "--num-executors",
                      "--executor-cores", "--executor-memory", "--driver-memory", "--name"}


def _check_spark_submit(words, command):
    """A ``spark-submit`` line: its flags are spark-submit's, each ``--conf`` a ``spark.*`` key, each archive
    unpacked under an alias (``#environment``), the deploy mode client or cluster, and its script is in the repo
    (the script's own flags follow it)."""
    script = next(i for i, w in enumerate(words) if w.endswith(".py"))
    assert os.path.exists(os.path.join(REPO, words[script])), f"no script {words[script]}: {command}"
    options = words[1:script]
    for i, word in enumerate(options):
        if not word.startswith("--"):
            continue
        assert word in SPARK_SUBMIT_FLAGS, f"{word} is not a spark-submit flag: {command}"
        value = options[i + 1]
        if word == "--conf":
            assert value.startswith("spark.") and "=" in value, f"--conf {value} is not spark.KEY=VALUE: {command}"
        if word == "--archives":
            assert all("#" in a for a in value.split(",")), f"--archives {value} names no alias (#name): {command}"
        if word == "--deploy-mode":
            assert value in ("client", "cluster"), f"--deploy-mode {value}: {command}"
    _check_python(["python", *words[script:]], command)


@pytest.mark.parametrize("doc,command", COMMANDS)
def test_each_command_in_the_docs_parses(doc, command):
    words = shlex.split(command)
    while re.match(r"^[A-Z_]+=", words[0]):
        words = words[1:]
    tool = os.path.basename(words[0])
    if tool == "make":
        makefile = open(os.path.join(REPO, "Makefile")).read()
        for target in (w for w in words[1:] if "=" not in w and not w.startswith("-")):
            assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), f"no make target {target}: {command}"
        return
    if tool == "spark-submit":
        _check_spark_submit(words, command)
        return
    if tool == "horovodrun" and any(w.startswith("localhost") for w in words):  # this machine: Gloo, or MPI if built
        assert "--gloo" in words or "--mpi" in words, f"name the controller (--gloo or --mpi): {command}"
    if tool.startswith("hvdkeras-"):
        scripts = TOOL.console_scripts()
        assert tool in scripts, f"no console script {tool}: {command}"
        words = ["python", "-m", scripts[tool].split(":")[0].removesuffix(".__main__")] + words[1:]
    python = next((i for i, w in enumerate(words) if re.match(r"^python[\d.]*$", os.path.basename(w))), None)
    cfg = _check_python(words[python:], command) if python is not None else None
    if cfg is not None:  # every world the command can make (-np, an elastic job's --min-np and --max-np) fits
        for i, word in enumerate(words[:-1]):
            if word.split("=")[0] in ("-np", "--np", "--min-np", "--max-np"):
                config_lib.validate_for_world(cfg, int(words[i + 1]))


def test_the_readmes_commands_run_as_written_in_a_fresh_clone():
    """Each command of the README's blocks starts with make or .venv/, or follows `source .venv/bin/activate`."""
    activated = False
    for line in _fenced(TEXTS["README.md"]):
        line = line.strip()
        activated = activated or line == "source .venv/bin/activate"
        if COMMAND.match(line) and not line.startswith(("make", ".venv/")):
            assert activated, f"{line} needs .venv/bin/ or a source .venv/bin/activate line before it"


def _paths():
    """(doc, path) for each path a doc cites: code spans starting with a folder of the checkout, and links."""
    found = []
    for name, text in TEXTS.items():
        for span in _spans(text) + re.findall(r"(?<![\w`/.])((?:tests|hvdkeras|tools|benchmarks|lab)/[\w/.*-]+\.py)",
                                              text):
            for word in span.split():
                word = word.strip("(),;'\"")
                if (word.startswith(TOP) or word in ROOT_FILES) and "<" not in word:
                    found.append((name, word))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not re.match(r"^[a-z]+:", target) and not target.startswith("#"):
                path = os.path.normpath(os.path.join(os.path.dirname(name), target.split("#")[0]))
                found.append((name, path))
    return sorted(set(found))


@pytest.mark.parametrize("doc,path", _paths())
def test_each_path_in_the_docs_exists(doc, path):
    path = re.sub(r":\d[\d,-]*$", "", path)  # file.py:123 or file.py:12-14
    path, _, test = path.partition("::")
    pattern = os.path.join(REPO, path)
    matches = glob.glob(pattern) if "*" in path else [pattern] if os.path.exists(pattern) else []
    assert matches, f"{doc} cites {path}, which does not exist"
    if test:
        name = test.split("::")[-1].split("[")[0]
        assert re.search(rf"^\s*(?:async )?(?:def|class) {re.escape(name)}\b", open(matches[0]).read(), flags=re.M), \
            f"{doc} cites {path}::{test}, which is not in that file"


def _named_tests():
    """(doc, file, test) for each ``file::test`` a doc names, in a code span: the file by its path or its name
    under tests/, or ``...`` for the file named last before it in that doc."""
    found = []
    for name, text in TEXTS.items():
        last = None
        for span in _spans(text):
            for file, test in re.findall(r"(\.\.\.|[\w/.-]+\.py)::([\w:]+)", span):
                if file == "...":
                    assert last, f"{name}: ...::{test} follows no file::test"
                    file = last
                last = file
                found.append((name, file, test))
    return found


@pytest.mark.parametrize("doc,file,test", _named_tests())
def test_each_named_test_exists(doc, file, test):
    paths = [os.path.join(REPO, file)] if "/" in file else glob.glob(os.path.join(REPO, "tests", "**", file),
                                                                       recursive=True)
    assert len(paths) == 1 and os.path.exists(paths[0]), f"{doc} names {file}, which is not one file of the tests"
    name = test.split("::")[-1]
    assert re.search(rf"^\s*(?:async )?(?:def|class) {re.escape(name)}\b", open(paths[0]).read(), flags=re.M), \
        f"{doc} names {file}::{test}, which is not in {os.path.relpath(paths[0], REPO)}"


def _slug(heading):
    """GitHub's anchor for a heading: links unwrapped, lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path):
    """Every anchor of a Markdown file (a repeated heading gets -1, -2, ... as on GitHub)."""
    anchors, seen = set(), {}
    fenced = re.sub(r"^```.*?^```", "", open(path).read(), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6} (.+)$", fenced, flags=re.M):
        slug = _slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors | set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", fenced))


def _links_with_anchors():
    """(where, file, anchor) for each link to an anchor in the docs, and each docs/<file>.md#anchor the code cites."""
    found = []
    for name, text in TEXTS.items():
        for target in re.findall(r"\]\(([^)\s]*#[^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            file, anchor = target.split("#", 1)
            found.append((name, os.path.normpath(os.path.join(os.path.dirname(name), file)) if file else name, anchor))
    for root in ("hvdkeras", "benchmarks", "tools", "lab", "Makefile"):
        for path in glob.glob(os.path.join(REPO, root, "**", "*.py"), recursive=True) + (
                [os.path.join(REPO, root)] if root == "Makefile" else []):
            for file, anchor in re.findall(r"(docs/(?:records/)?[\w-]+\.md)#([\w-]+)", open(path).read()):
                found.append((os.path.relpath(path, REPO), file, anchor))
    return sorted(set(found))


@pytest.mark.parametrize("where,file,anchor", _links_with_anchors())
def test_each_anchor_cited_exists(where, file, anchor):
    assert os.path.exists(os.path.join(REPO, file)), f"{where} links to {file}, which does not exist"
    assert anchor in _anchors(os.path.join(REPO, file)), f"{where} links to {file}#{anchor}: no such heading"


# Variables hvdkeras sets for itself, not for you.
INTERNAL_VARIABLES = {"HVDKERAS_APPLIED_HOROVOD_ENV"}


def _variables_in_code():
    """The HVDKERAS_* environment variables the code reads: string literals in Python, names in shell and make."""
    found = set()
    for path in glob.glob(os.path.join(REPO, "**", "*.py"), recursive=True) + glob.glob(
            os.path.join(REPO, "tools", "*.sh")) + [os.path.join(REPO, "Makefile")]:
        if "/." in os.path.relpath(path, REPO) or os.path.relpath(path, REPO).startswith(("runs", ".")):
            continue
        text = open(path).read()
        pattern = r"[\"'](HVDKERAS_[A-Z0-9_]+)[\"'=]" if path.endswith(".py") else r"\b(HVDKERAS_[A-Z0-9_]+)\b"
        found.update(re.findall(pattern, text))
    return found - INTERNAL_VARIABLES


def test_each_environment_variable_is_documented_and_each_documented_one_exists():
    documented = set(re.findall(r"\b(HVDKERAS_[A-Z0-9_]+)\b", "".join(TEXTS.values())))
    in_code = _variables_in_code()
    assert in_code - documented == set(), "document these variables in docs/"
    assert documented - in_code == set(), "the docs name variables nothing reads"


# What an outer make hands this process (`make test STACK=keras3` runs these tests): a user's shell has none
# of it, and make would pass STACK=keras3 on to `make -n train`.
OUTER_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "STACK", "CONFIG", "WORKDIR", "VENV", "NP")


def _make_train_workdir(*args):
    """The --workdir of the training command `make train <args>` runs (make -n: printed, nothing run), as from a
    user's shell."""
    env = {k: v for k, v in os.environ.items() if k not in OUTER_MAKE}
    out = subprocess.run(["make", "-n", "train", *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                         check=True, env=env).stdout
    line = next(line for line in out.splitlines() if "-m hvdkeras.train" in line)
    return shlex.split(line)[shlex.split(line).index("--workdir") + 1]


def test_the_readmes_make_train_then_make_train_on_keras3_run_one_after_another_in_one_clone(tmp_path):
    """The README offers `make train`, then `make train STACK=keras3`. The first leaves a finished run trained
    on keras2; the second goes to its own workdir, which the resume check lets train. The same job pointed at
    the first one's workdir is refused in one line by that check (it tried to resume and failed before)."""
    from hvdkeras.common import workdir_guard
    from hvdkeras.common.workdir import save_config
    from tests.unit.common.test_stack import _pinned

    readme = TEXTS["README.md"]
    assert readme.index("make train") < readme.index("make train STACK=keras3")
    first, second = _make_train_workdir(), _make_train_workdir("STACK=keras3")
    assert first != second
    cfg = config_lib.load(os.path.join(REPO, "configs", "digits.yaml"), [])
    keras2, keras3 = _pinned("keras2"), _pinned("keras3")
    trained = tmp_path / first  # what the first command leaves: 15 epochs' checkpoints, keras2's stack recorded
    (trained / "checkpoints" / "epoch-0015").mkdir(parents=True)
    save_config(cfg, str(trained / "config.yaml"), footer=["Resolved for this job:", f"  {keras2.line()}"])
    workdir_guard.check_same_training(str(tmp_path / second), cfg, running=keras3)  # the second trains
    with pytest.raises(config_lib.ConfigError, match=r"^--workdir \S+ holds checkpoints trained on another stack"):
        workdir_guard.check_same_training(str(trained), cfg, running=keras3)


def test_the_readme_is_short_and_indexes_every_doc():
    readme = TEXTS["README.md"]
    assert len(readme.splitlines()) <= 120, "the README holds at most 120 lines: move detail to docs/"
    for name in DOCS[1:] + [RECORDS_INDEX]:
        assert f"]({name})" in readme, f"the README's index does not link {name}"


def test_the_records_index_links_every_record():
    assert RECORDS_INDEX in RECORDS, "docs/records/README.md indexes the records"
    for name in RECORDS:
        if name != RECORDS_INDEX:
            assert f"]({os.path.basename(name)})" in TEXTS[RECORDS_INDEX], f"{RECORDS_INDEX} does not link {name}"


def _sentences(text):
    """The prose sentences of a Markdown text of 80 characters or more, whitespace folded (fenced blocks, tables
    and headings left out)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    prose = "\n".join(line for line in prose.splitlines() if not line.startswith(("|", "#")))
    prose = re.sub(r"`[^`\n]{40,}`", "`...`", prose)  # a quoted message or command may appear where it applies
    return {s for s in (" ".join(part.split()) for part in re.split(r"(?<=[.:;])\s", prose)) if len(s) >= 80}


def test_no_doc_repeats_another_docs_sentences():
    seen = {}
    for name, text in sorted(TEXTS.items()):
        for sentence in _sentences(text):
            assert sentence not in seen, f"{name} repeats {seen[sentence]}: {sentence!r}"
            seen[sentence] = name


# What a measured performance figure looks like: a rate, a fraction of the ceiling, a ratio against a rival.
FIGURE = re.compile(r"\d[\d,.]* images/s|\b[01]\.\d\d\b[^.|\n]{0,40}\bceiling|\d\.\d+x (?:Horovod|MWMS|Multi|the)"
                    r"|scaling efficiency \d")


def test_measured_figures_live_in_performance_md_and_the_records():
    for name in [*DOCS, "CHANGELOG.md"]:
        if name == "docs/performance.md":
            continue
        text = TEXTS.get(name) or open(os.path.join(REPO, name)).read()
        found = FIGURE.findall(text)
        assert not found, (f"{name} carries measured figures {found}: give them a row in docs/performance.md (or the "
                           "run in docs/records/), link it")


# What belongs in a record, not on a page a user reads: a development session, a fresh clone's run label, an issue.
RECORD_LABELS = {
    "a session": re.compile(r"\bsessions? \d+", re.I),
    "a run label": re.compile(r"\bfc\d+[a-z]?\b", re.I),
    "an issue number": re.compile(r"\bissues? \d+|\(#\d+\)", re.I),
}


@pytest.mark.parametrize("name", [*DOCS, "CHANGELOG.md"])
def test_no_user_page_names_a_session_a_run_label_or_an_issue(name):
    text = TEXTS.get(name) or open(os.path.join(REPO, name)).read()
    for what, pattern in RECORD_LABELS.items():
        found = sorted({m.group(0) for m in pattern.finditer(text)})
        assert not found, (f"{name} names {what}: {found}. Say what a user gets; how and when it was measured goes "
                           "to docs/records/, which the page may link")


def test_no_code_names_an_issue_number():
    """The code, its tests and the Makefile say what they do, not which issue asked for it (this file's own examples
    of what is refused aside)."""
    found = []
    for folder in ("hvdkeras", "tests", "benchmarks", "lab", "tools", "examples", ".ci"):
        for root, dirs, files in os.walk(os.path.join(REPO, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                path = os.path.join(root, name)
                if path == os.path.abspath(__file__):
                    continue
                try:
                    text = open(path, encoding="utf-8").read()
                except (UnicodeDecodeError, IsADirectoryError):
                    continue
                found += [f"{os.path.relpath(path, REPO)}: {m.group(0)}"
                          for m in RECORD_LABELS["an issue number"].finditer(text)]
    found += [f"Makefile: {m.group(0)}" for m in RECORD_LABELS["an issue number"].finditer(
        open(os.path.join(REPO, "Makefile")).read())]
    assert not found, found


def test_the_record_labels_are_recognised():
    for text in ("Session 57 measured it", "in fc50a", "fc41's run", "(issue 50)", "issues 50 and 52", "(#12)"):
        assert any(p.search(text) for p in RECORD_LABELS.values()), text
    for text in ("a session of its own", "the session's two-epoch run", "fc layers", "an issue with GPUs",
                 "horovod#4290", "keras-team/keras#20585"):
        assert not any(p.search(text) for p in RECORD_LABELS.values()), text


def test_each_guard_security_md_states_names_the_test_that_proves_it():
    """SECURITY.md, claim by claim: each bullet of "What is trusted" that states a guard, and each port whose guard
    is hvdkeras's or Horovod's patched one (not "none", not Spark's, Ray's or Open MPI's own settings), names a test."""
    text = TEXTS["SECURITY.md"]
    trusted = text.split("## What is trusted", 1)[1].split("\n## ", 1)[0]
    bullets = [b for b in re.split(r"\n- ", trusted)[1:]]
    ports = [line for line in text.split("## Every port a job opens", 1)[1].split("\n## ", 1)[0].splitlines()
             if line.startswith("| ") and not line.startswith(("| who", "| ---"))]
    own = r"\| (none|Open MPI's own|`spark\.authenticate`|`RAY_AUTH_MODE=token`)"  # Spark's, Ray's, Open MPI's settings
    guarded = [row for row in ports if not re.search(own, row)]
    test = re.compile(r"test_\w+\.py(::\w+)?")
    missing = [b.split("\n")[0][:80] for b in bullets if not test.search(b)]
    missing += [row[:80] for row in guarded if not test.search(row)]
    assert not missing, f"SECURITY.md states these guards without the test that proves them: {missing}"


def test_the_system_packages_docs_testing_md_lists_are_the_makefiles():
    makefile = open(os.path.join(REPO, "Makefile")).read()
    recipe = re.search(r"^system-deps:\n((?:\t.*\n)+)", makefile, re.M).group(1)
    recipe = re.sub(r"\$\(if [^,]*,,([^)]*)\)", r"\1", recipe.replace("\\\n", " "))  # llvm-dev, when llvm-config lacks
    installed = set(recipe.split()) - {"bash", "tools/system_deps.sh", "--if-root"}
    listed = re.search(r"\(`(openmpi-bin [a-z0-9 .\n-]+)`, the\s+Makefile's list", TEXTS["docs/testing.md"]).group(1)
    assert set(listed.split()) == installed, f"docs/testing.md lists {sorted(listed.split())}; the Makefile installs" \
                                             f" {sorted(installed)}"

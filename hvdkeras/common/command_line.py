"""What every ``python -m hvdkeras.<command>`` shares: absl's flags, and one line with exit status 2 for what the user
can fix.

absl (``absl.flags``) is the command lines' flag library. ``hvdkeras.train`` defines its flags, and the dry run's
(:mod:`hvdkeras.launch.cli`), on absl's process-wide ``FLAGS`` and runs under ``absl.app``, as the program of its
process. Every other command defines its flags on a ``FlagValues`` of its own (:func:`flag_values`): a module that is
also a library (:mod:`hvdkeras.report`) adds no flag to the program that imports it, and commands that share flag
names (``--config``, ``--set``, ``--workdir``) can be imported into one process (the reference generator, the tests).

In every command an error the user can fix, an :class:`~hvdkeras.common.errors.HvdkerasError` or a flag absl cannot
parse, ends the command with one line on stderr, ``hvdkeras: error: <its first line>``
(:func:`hvdkeras.common.log.command_error`), and exit status 2; any other exception is a bug and keeps its traceback.
"""
from __future__ import annotations

import sys
import textwrap
from typing import Callable, List, NoReturn, Optional, Sequence

from absl import flags

from hvdkeras.common import log
from hvdkeras.common.errors import HvdkerasError

Main = Callable[[List[str]], Optional[int]]
HELP = ("-h", "-help", "--help", "-?", "--helpshort", "--helpfull")


def flag_values() -> flags.FlagValues:
    """A command's own set of flags (define each with ``flag_values=``), apart from absl's process-wide ``FLAGS``."""
    new: Callable[[], flags.FlagValues] = flags.FlagValues  # absl 2 leaves its __init__ untyped; 1.4 has no types
    return new()


def error_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name when it has none."""
    text = str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def fail(message: str) -> NoReturn:
    """One line on stderr, ``hvdkeras: error: <message>``, then exit status 2."""
    log.command_error(message)
    sys.exit(2)


def _help(values: flags.FlagValues, usage: str) -> str:
    """``usage``, then each flag with its help and default (absl's words: ``--[no]name`` for a boolean)."""
    lines = [usage.strip()]
    unique = {values[name].name: values[name] for name in values}
    if unique:
        lines += ["", "flags:"]
    for name, flag in sorted(unique.items()):
        shown = f"--[no]{name}" if flag.boolean else f"--{name}"
        text = " ".join(flag.help.split()).removesuffix("; repeat this option to specify a list of values")
        default = f" (default: {flag.default_as_str})" if flag.default_as_str and not flag.default == [] else ""
        lines.append(textwrap.fill(f"{shown}: {text}{default}", width=100,
                                   initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines) + "\n"


def parse(values: flags.FlagValues, argv: Sequence[str], usage: str = "") -> List[str]:
    """Parses ``argv`` (the program's name first) into ``values``; returns the program's name and the arguments
    that are not flags.

    Each parse starts from the flags' defaults. ``--help`` (or ``-h``) before ``--`` prints ``usage`` and the flags
    and exits with status 0; a flag absl cannot parse (unknown, without its value, a value of the wrong kind)
    fails in one line (:func:`fail`). Not for absl's process-wide ``FLAGS``, whose help flags are absl's.
    """
    argv = list(argv)
    words = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    if any(word in HELP for word in words):
        print(_help(values, usage), end="")
        sys.exit(0)
    values.unparse_flags()
    try:
        return list(values(argv))
    except flags.Error as exc:
        fail(f"{error_line(exc)}; --help lists the flags")


def status(main: Main, argv: Sequence[str]) -> int:
    """``main(argv)``'s exit status (0 for ``None``); 2 after an :class:`HvdkerasError`, said in one line."""
    try:
        return main(list(argv)) or 0
    except HvdkerasError as exc:
        log.command_error(error_line(exc))
        return 2


def call(main: Main, values: flags.FlagValues, argv: Sequence[str], usage: str = "") -> int:
    """Parses ``argv`` (the program's name first) into ``values`` and runs ``main`` on the rest; returns its exit
    status (:func:`status`). The command, in this process: what :func:`run` does without exiting."""
    return status(main, parse(values, argv, usage))


def _parse_process_flags(argv: List[str]) -> List[str]:
    """absl's ``FLAGS``, parsed as ``absl.app`` does, but a flag it cannot parse is one line and exit status 2."""
    try:
        return list(flags.FLAGS(argv))
    except flags.Error as exc:
        fail(f"{error_line(exc)}; --helpshort lists the flags")


def run(main: Main, values: Optional[flags.FlagValues] = None, usage: str = "") -> NoReturn:
    """Runs a command: parses ``sys.argv`` and exits with ``main``'s status (:func:`status`).

    With ``values``, the command's own flags (:func:`flag_values`), it runs without ``absl.app``; absl's ``FLAGS``
    are marked parsed, at their defaults, for the libraries that read them. Without, it runs ``main`` under
    ``absl.app.run`` on absl's ``FLAGS`` (``hvdkeras.train``).
    """
    if values is None:
        from absl import app

        app.run(lambda argv: status(main, argv), flags_parser=_parse_process_flags)
        sys.exit(0)  # app.run exits itself; this line is for the type checker
    rest = parse(values, sys.argv, usage)
    flags.FLAGS.mark_as_parsed()
    sys.exit(status(main, rest))

"""Host discovery for elastic Horovod: print the ``host:slots`` lines of the hosts file.

    printf 'host1:4\\nhost2:4\\n' > hosts.txt
    HVDKERAS_HOSTS_FILE=hosts.txt horovodrun -np 8 --min-np 4 \\
        --host-discovery-script "python -m hvdkeras.discover_hosts" python -m hvdkeras.train ...

Horovod runs the discovery command through the shell about once a second and takes
its output as the hosts now available. The file is ``$HVDKERAS_HOSTS_FILE``
(``hosts.txt`` in the working directory when unset); edit it while the job runs to
add or remove hosts. Blank lines and ``#`` comments are skipped; a missing file
means no hosts yet (an empty answer, as Horovod expects while workers come up).
Each line is checked at every discovery: a line that is not ``host`` or ``host:slots`` (a host
name or an IPv4 address; Horovod splits at ``:``, so no IPv6) is left out with one line on
stderr, since Horovod puts what it prints unquoted into its ssh commands.

Installed with the package (no checkout needed) and imports nothing heavy: the
command is Python's start-up and one file read.
"""
from __future__ import annotations

import os
import sys
from typing import List, Mapping, Optional, TextIO

from hvdkeras.common import hostnames, log
from hvdkeras.common.errors import LaunchError, shown

HOSTS_FILE_VARIABLE = "HVDKERAS_HOSTS_FILE"
DEFAULT_HOSTS_FILE = "hosts.txt"
# The command the dry run writes into elastic launch lines (`python` is the job's interpreter there).
COMMAND = "python -m hvdkeras.discover_hosts"


def host_lines(text: str) -> List[str]:
    """The ``host`` or ``host:slots`` lines of a hosts file's text, without blanks and ``#`` comments."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            found.append(line)
    return found


def checked_lines(text: str, source: str, errors: Optional[TextIO] = None) -> List[str]:
    """The hosts file's lines that are ``host`` or ``host:slots`` with a host name or IPv4 address.

    Args:
        text: The hosts file's text.
        source: Where it came from, for the messages (``hosts file hosts.txt``).
        errors: Where each refused line is said, in one line (default: stderr).

    Returns:
        The good lines, as written.
    """
    good = []
    for line in host_lines(text):
        try:
            name, _ = hostnames.parse_entry(line, source, example="node-1:4")
            if hostnames.is_ipv6(name):
                raise LaunchError(f"{source}: entry {shown(line)} is an IPv6 address, which Horovod's host"
                                  " discovery cannot take (it splits host:slots at ':'); give the host's name")
        except LaunchError as exc:
            print(log.warning_line(f"left out: {exc}"), file=errors or sys.stderr)
            continue
        good.append(line)
    return good


USAGE = f"""usage: {COMMAND}

Prints the host:slots lines of ${HOSTS_FILE_VARIABLE} ({DEFAULT_HOSTS_FILE} when unset) for elastic Horovod's host
discovery; takes no arguments."""


def main(argv: Optional[List[str]] = None, environ: Optional[Mapping[str, str]] = None) -> int:
    """Prints the hosts file's checked host lines (nothing when the file is missing); returns 0.

    ``--help`` prints the usage (status 0); any other argument, or a hosts file that cannot be read, is one line,
    ``hvdkeras: error: ...``, and status 2, as every command's errors are.
    """
    args = list(argv or ())  # the command line's arguments (python -m passes them; a caller passes none)
    if args:
        if args[0] in ("-h", "-help", "--help", "-?", "--helpshort", "--helpfull"):
            print(USAGE)
            return 0
        log.command_error(f"{COMMAND} takes no arguments; received: {shown(args[0])} (the hosts file is"
                          f" ${HOSTS_FILE_VARIABLE})")
        return 2
    environ = os.environ if environ is None else environ
    path = environ.get(HOSTS_FILE_VARIABLE) or DEFAULT_HOSTS_FILE
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        log.command_error(f"the hosts file {shown(path, 300)} (${HOSTS_FILE_VARIABLE}) cannot be read ({why}):"
                          " make it a readable text file of host:slots lines")
        return 2
    for line in checked_lines(text, f"hosts file {path}"):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

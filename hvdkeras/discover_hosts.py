"""Host discovery for elastic Horovod: print the ``host:slots`` lines of the hosts file.

    printf 'host1:4\\nhost2:4\\n' > hosts.txt
    HVDKERAS_HOSTS_FILE=hosts.txt horovodrun -np 8 --min-np 4 \\
        --host-discovery-script "python -m hvdkeras.discover_hosts" python -m hvdkeras.train ...

Horovod runs the discovery command through the shell about once a second and takes
its output as the hosts now available. The file is ``$HVDKERAS_HOSTS_FILE``
(``hosts.txt`` in the working directory when unset); edit it while the job runs to
add or remove hosts. Blank lines and ``#`` comments are skipped; a missing file
means no hosts yet (an empty answer, as Horovod expects while workers come up).

Installed with the package (no checkout needed) and imports nothing heavy: the
command is Python's start-up and one file read.
"""
from __future__ import annotations

import os
import sys
from typing import List, Mapping, Optional

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


def main(argv: Optional[List[str]] = None, environ: Optional[Mapping[str, str]] = None) -> int:
    """Prints the hosts file's host lines (nothing when the file is missing); returns 0."""
    environ = os.environ if environ is None else environ
    path = environ.get(HOSTS_FILE_VARIABLE) or DEFAULT_HOSTS_FILE
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return 0
    for line in host_lines(text):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

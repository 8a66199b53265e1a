"""Hostile strings for property-based tests, and the settings they run with.

``make test`` runs each property with :data:`SUITE_EXAMPLES` generated cases from a fixed seed (the same cases on every
run); ``HVDKERAS_HOSTILE_EXAMPLES=N`` runs N cases each from a random seed, for a bad-input campaign.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from hvdkeras.common.errors import HvdkerasError

SUITE_EXAMPLES = 150
EXAMPLES_VAR = "HVDKERAS_HOSTILE_EXAMPLES"

_campaign = int(os.environ.get(EXAMPLES_VAR, "0") or 0)
# Fixed seed and no example database in the suite: the same cases every run, nothing written to the tree.
PROPERTY = settings(max_examples=_campaign or SUITE_EXAMPLES, derandomize=not _campaign, database=None,
                    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# What a shell, ssh, YAML or a #SBATCH line treats specially, and what hides in names.
SHELL_BITS = [";", "&", "|", "$(id)", "`id`", "'", '"', "\\", "\n", "\r", " ", "\t", "#", ">", "<", "*", "?", "~",
              "{a,b}", "$HOME", "%", "!", ":", ",", "[", "]", "..", "/", "-", "--", "\x00", "\u2028", "é", "٣"]
hostile_bits = st.sampled_from(SHELL_BITS)
# Text that is mostly a plausible value with hostile pieces in it.
hostile_text = st.lists(st.one_of(hostile_bits, st.text(min_size=1, max_size=8),
                                  st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True)), max_size=6).map("".join)
label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
host_name = st.lists(label, min_size=1, max_size=3).map(".".join)
ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
# A host entry: good, or good with hostile pieces, or anything at all.
host_entry = st.one_of(
    host_name, ipv4, st.tuples(host_name, st.integers(1, 64)).map(lambda t: f"{t[0]}:{t[1]}"),
    st.tuples(host_name, hostile_text).map("".join), hostile_text)


def one_line(fn: Callable[[], Any]) -> Any:
    """``fn()``'s result, or the message of the HvdkerasError it raised, which must be one line (any other exception
    fails the test that calls it: hostile input never gets a traceback)."""
    try:
        return fn()
    except HvdkerasError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 600, str(exc)
        return str(exc)

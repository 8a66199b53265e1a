"""The errors a user can fix, each reported by the command line as one line without a traceback.

Every such error derives from :class:`HvdkerasError`; ``python -m hvdkeras.train``
catches that base and prints ``hvdkeras: error: <first line>``.
Anything else is a bug in hvdkeras or below it and keeps its traceback.
"""
from __future__ import annotations

from typing import Any, Optional


def shown(value: Any, limit: int = 80) -> str:
    """``value`` as a one-line message shows what was received: its repr cut to ``limit`` characters, a huge integer
    by its size (its repr alone could be thousands of digits, or refused by Python past 4300)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class HvdkerasError(Exception):
    """A problem the user can fix; its message is one line saying what was wrong and how to fix it."""


class ConfigError(HvdkerasError, ValueError):
    """A configuration problem.

    Raised with :meth:`for_key`, it remembers the key, the rule and the received value,
    so code that knows where the key's value came from (see
    :func:`hvdkeras.config.locate`) can name the file or ``--set`` in the message.
    """

    def __init__(self, message: str, *, key: Optional[str] = None, rule: Optional[str] = None,
                 received: Any = None):
        super().__init__(message)
        self.key, self.rule, self.received = key, rule, received

    @classmethod
    def for_key(cls, key: str, rule: str, received: Any, source: Optional[str] = None) -> "ConfigError":
        """``<key> in <source> must <rule>; received: <value>`` (``in <source>`` when it is known)."""
        where = f" in {source}" if source else ""
        return cls(f"{key}{where} must {rule}; received: {received!r}", key=key, rule=rule, received=received)

    def with_source(self, source: str) -> "ConfigError":
        """The same error naming where its key's value came from (itself when it has no key)."""
        if self.key is None or self.rule is None:
            return self
        return type(self).for_key(self.key, self.rule, self.received, source)


class LaunchError(ConfigError):
    """A launch option of the dry run (``--np``, ``--hosts``, ``--launcher``, ...) that cannot work."""


class SetupError(HvdkerasError, RuntimeError):
    """This process cannot be set up as asked (for example, no GPU left for its local rank)."""


class HorovodNotLoadedError(HvdkerasError, ImportError):
    """Horovod's TensorFlow ops cannot be imported here: not installed, not built, or built for another TensorFlow
    (an ``ImportError`` too, so code that tries the import and goes without still can)."""


class PreflightError(SetupError):
    """Ranks differ in something that must be identical (config, model, steps, versions)."""


class CheckpointError(HvdkerasError, RuntimeError):
    """A checkpoint cannot be written or read; the ones already written are left as they are."""


class DivergenceError(HvdkerasError, RuntimeError):
    """The ranks hold different trainable weights: they train apart (:mod:`hvdkeras.callbacks.divergence`)."""


class PeerLostError(HvdkerasError, RuntimeError):
    """A collective failed because another rank's process or host is gone (see :mod:`hvdkeras.common.peers`)."""


class RankFailedError(RuntimeError):
    """A rank of a Spark job failed (its process, its task or its executor) and no retry was left; the text names the
    rank, its host and why, as the launcher saw it. The Spark estimator turns it into one line; an error raised on
    the driver is never one."""


class PeerUnresponsiveError(HvdkerasError, RuntimeError):
    """A collective failed because another rank's process is there but does not answer (stopped, e.g. by
    ``SIGSTOP``, or hung; see :mod:`hvdkeras.common.peers`)."""


class StallError(HvdkerasError, RuntimeError):
    """Horovod shut the job down because a rank stalled longer than ``horovod.stall_shutdown_seconds``."""


class ReportError(HvdkerasError):
    """``metrics.jsonl`` is missing or holds no records."""

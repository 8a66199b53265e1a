"""How a gang fails: typed exceptions, and the one line that carries one across an engine's process boundary.

A task of the gang runs in another process (a Spark executor's Python worker, a Ray actor), and the engine hands
the driver only the text of what the task raised. :func:`carried` turns a typed failure into the exception a task
raises, whose text holds one line ``hvdkeras-failure {"kind": ..., "reason": ...}``; :func:`received` finds that
line in whatever the engine wraps around it and gives the typed exception back. No other marker is parsed.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Type

from hvdkeras.common.errors import HvdkerasError, RankFailedError, SetupError

MARK = "hvdkeras-failure"


class RankExitedError(RankFailedError):
    """A rank of the gang failed (its process exited non-zero): the attempt ends, and a retry may start."""


class RetriesExhaustedError(RankFailedError):
    """No retry was left when the gang was to start again."""


class CannotStartError(SetupError):
    """A rank cannot be started where the engine put it (its Python, its Horovod): no retry mends it."""


class StartTimeoutError(SetupError):
    """The gang's tasks did not all start within the start timeout."""


_KINDS: Dict[str, Type[Exception]] = {cls.__name__: cls for cls in (RankExitedError, RetriesExhaustedError,
                                                                     CannotStartError)}


def carried(error: Exception) -> RuntimeError:
    """What a task raises for ``error`` (one of :data:`_KINDS`): its text is the one line :func:`received` reads."""
    return RuntimeError(f"{MARK} {json.dumps({'kind': type(error).__name__, 'reason': str(error)})}")


def received(error: BaseException) -> Optional[Exception]:
    """The typed failure a task carried (:func:`carried`) in the text of ``error`` as the engine handed it over,
    or None when it carries none."""
    for line in str(error).splitlines():
        if MARK + " {" not in line:
            continue
        try:
            found, _ = json.JSONDecoder().raw_decode(line[line.index(MARK + " {") + len(MARK) + 1:])
        except ValueError:
            continue
        if not isinstance(found, dict):
            continue
        kind, reason = _KINDS.get(str(found.get("kind"))), found.get("reason")
        if kind is not None and isinstance(reason, str):
            return kind(reason)
    return None


def start_timeout(num_proc: int, timeout_s: float, detail: str = "", tasks: str = "Spark tasks") -> StartTimeoutError:
    """The one line for ranks whose ``tasks`` (the engine's word for them) did not all start in time."""
    said = f" ({detail})" if detail else ""
    return StartTimeoutError(f"the {num_proc} ranks' {tasks} did not all start within start_timeout={timeout_s:g}"
                        f" s{said}; check that the executors are alive and have {num_proc} free task slots, or raise"
                        " start_timeout")


def reason_of(error: BaseException) -> str:
    """A rank's failure as the engine reported it, in one clause: its first three lines, at most 240 characters."""
    text = " ".join(line.strip() for line in str(error).splitlines()[:3] if line.strip())[:240]
    return text or type(error).__name__


# How engines and cluster managers say a process was killed for its memory (YARN, Kubernetes, the JVM, the kernel).
_FOR_MEMORY = ("exceeding memory limits", "oomkilled", "outofmemoryerror", "out of memory", "cannot allocate memory",
               "memory limit")
MEMORY_PAGE = "docs/troubleshooting.md#an-executor-killed-for-memory"


def memory_advice(reason: str) -> str:
    """``"; <advice>"`` when a failure's ``reason`` says a process was killed for its memory, else ``""``."""
    if not any(mark in reason.lower() for mark in _FOR_MEMORY):
        return ""
    return ("; a process was killed for its memory: each rank is a TensorFlow process beside the executor's JVM,"
            f" so raise spark.executor.memoryOverhead or run fewer ranks per executor ({MEMORY_PAGE})")


@dataclasses.dataclass(frozen=True)
class Refused:
    """What a rank returns, as its result, when the job refused it for a reason the user can fix (a
    :class:`~hvdkeras.common.errors.HvdkerasError`: a config its parameters make, a store it cannot read): the gang
    ends as if it succeeded, so no retry starts, and the driver raises ``error`` (:func:`raise_refused`)."""

    error: HvdkerasError


def returning_refusals(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` for a rank: what it returns, or :class:`Refused` for the user error it raised."""

    @functools.wraps(fn)
    def rank(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HvdkerasError as exc:
            return Refused(exc)

    return rank


def raise_refused(results: Sequence[Any]) -> List[Any]:
    """The ranks' results in rank order; the first rank's :class:`Refused` error raised instead, when one was."""
    for result in results:
        if isinstance(result, Refused):
            raise result.error
    return list(results)

"""What one attempt of the soaked job said: its start position, a preemption, damaged checkpoints, errors.

Reads the lines the trainer prints (rank 0's and every rank's, as ``horovodrun`` tags them), each with
the soak's clock time; no TensorFlow. Positions are ``(epochs done, batches done of the next)``, as the
trainer and its checkpoints count them (:class:`hvdkeras.runtime.checkpointing.CheckpointInfo`).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Tuple

RESUMING = re.compile(r"resuming after epoch (\d+)(?: and batch (\d+) of epoch \d+)? from ")
FRESH = "starting fresh"
PREEMPTED = re.compile(r"hvdkeras: preempted at (?:epoch (\d+), batch (\d+)|the end of epoch (\d+));"
                       r" checkpoint written: (\S+)")
DAMAGED = re.compile(r"checkpoint (\S+) is damaged \(")
ERROR = re.compile(r"hvdkeras: error: (.*)")
STEPS = re.compile(r"steps per epoch (\d+)")
FINAL = re.compile(r"final validation \([^)]*\): (.*)")
RANK_EXIT = re.compile(r"^Process \d+ exit with status code (-?\d+)")  # horovodrun's line as each rank ends
CHECKPOINT_NAME = re.compile(r"^epoch-(\d+)(?:-batch-(\d+))?$")
# The elastic driver's line on every rank whenever a world forms (hvdkeras.training.drivers.elastic):
# rank/size, position.
ELASTIC = re.compile(r"rank (\d+)/(\d+): elastic (?:starting|resuming) at epoch (\d+), batch (\d+) ")
KERAS_STEPS = re.compile(r"(?:^|\s|:)(\d+)/\1 - \d")  # Keras's epoch line ("22/22 - 2s - ..."): an elastic job's steps

Position = Tuple[int, int]


def checkpoint_position(name: str) -> Optional[Position]:
    """``(epoch, batch)`` of a checkpoint folder's name (``epoch-0003``, ``epoch-0003-batch-0041``), else None."""
    match = CHECKPOINT_NAME.match(name)
    return (int(match.group(1)), int(match.group(2) or 0)) if match else None


def absolute(position: Position, steps: int) -> int:
    """A position as batches since the start of training."""
    return position[0] * steps + position[1]


@dataclasses.dataclass
class Said:
    """What an attempt's output says (each time is the soak's clock when the first such line came)."""

    resumed: Optional[Position] = None  # where it started: the "resuming after" line, (0, 0) when fresh
    resumed_at: Optional[float] = None
    preempted: Optional[Position] = None  # the "preempted at" line's position
    damaged: List[str] = dataclasses.field(default_factory=list)  # checkpoints the trainer found damaged
    errors: List[str] = dataclasses.field(default_factory=list)  # its "hvdkeras: error:" lines, once each
    steps: Optional[int] = None  # steps per epoch
    final: Dict[str, float] = dataclasses.field(default_factory=dict)  # the final validation's metrics
    failing_at: Optional[float] = None  # when the launcher saw the first rank end with a non-zero status
    worlds: List["World"] = dataclasses.field(default_factory=list)  # an elastic job's worlds, as rank 0 said them


@dataclasses.dataclass(frozen=True)
class World:
    """One world an elastic job formed: when rank 0 said so, its number of ranks, where it went on from."""

    at: float
    size: int
    position: Position  # (epochs done, batches done of the next), as the committed state had it


def read(lines: Sequence[Tuple[float, str]], elastic: bool = False) -> Said:
    """What the timed ``lines`` of one attempt say (the first of each line that every rank prints). Of an
    ``elastic`` job: each world rank 0 announces, its first as the start; a worker's exit does not end the job."""
    said = Said()
    for at, line in lines:
        match = ELASTIC.search(line) if elastic else None
        if match and match.group(1) == "0":
            position = (int(match.group(3)) - 1, int(match.group(4)))
            said.worlds.append(World(at, int(match.group(2)), position))
            if said.resumed is None:
                said.resumed, said.resumed_at = position, at
        if elastic and said.steps is None:
            match = KERAS_STEPS.search(line)
            if match:
                said.steps = int(match.group(1))
        if said.resumed is None:
            match = RESUMING.search(line)
            if match:
                said.resumed, said.resumed_at = (int(match.group(1)), int(match.group(2) or 0)), at
            elif FRESH in line:
                said.resumed, said.resumed_at = (0, 0), at
        match = PREEMPTED.search(line)
        if match and said.preempted is None:
            said.preempted = ((int(match.group(1)) - 1, int(match.group(2))) if match.group(3) is None
                              else (int(match.group(3)), 0))
        match = DAMAGED.search(line)
        if match and match.group(1) not in said.damaged:
            said.damaged.append(match.group(1))
        match = ERROR.search(line)
        if match and match.group(1).strip() not in said.errors:
            said.errors.append(match.group(1).strip())
        match = STEPS.search(line)
        if match and said.steps is None:
            said.steps = int(match.group(1))
        match = RANK_EXIT.search(line)
        if match and match.group(1) != "0" and said.failing_at is None and not elastic:
            said.failing_at = at
        match = FINAL.search(line)
        if match:
            for item in match.group(1).split(","):
                key, _, value = item.strip().partition("=")
                try:
                    said.final[key] = float(value)
                except ValueError:
                    pass
    return said

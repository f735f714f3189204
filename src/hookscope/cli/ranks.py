"""``hookscope trace`` under ``torchrun``: one output per rank, and the gathered one.

``torchrun`` starts the command once per rank with ``RANK`` and ``WORLD_SIZE`` in the
environment. Each rank traces its own copy of the model and writes ``-o out.json`` as
``out.rank0.json``, ``out.rank1.json``, ...; only rank 0 prints to the terminal. With
``--gather`` every rank's trace is collected on rank 0 (``Trace.gather``: the job's
process group, initialised here with gloo when the model's factory did not make one),
which writes the merged view to ``out.json`` (or prints it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hookscope.cli.output import OutputTarget, Rendered

if TYPE_CHECKING:
    from hookscope.core.records.trace import Trace
    from hookscope.distributed.gathered import GatheredTrace

__all__ = ["Launch", "QuietTarget", "job_group", "launch", "mark_rank", "rank_path",
           "rank_targets", "write_gathered"]


@dataclass(frozen=True)
class Launch:
    """This process's place in a ``torchrun`` job."""

    rank: int
    world_size: int


def launch(*, gather: bool, fmt: str) -> Launch | None:
    """The job this process is a rank of (``None``: not under ``torchrun``).

    Raises:
        SpecError: ``--gather`` outside a job of several ranks, or with ``--format csv``.
    """
    from hookscope.errors import SpecError

    if gather and fmt == "csv":
        raise SpecError("--gather writes a table or one JSON document; use --format "
                        "table or json (each rank's own CSV is written without --gather)")
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        rank, world = 0, 1
    if world <= 1:
        if gather:
            raise SpecError("--gather collects the traces of the ranks of a torchrun job; "
                            "run: torchrun --nproc-per-node 2 -m hookscope trace ... --gather")
        return None
    return Launch(rank, world)


def rank_path(path: Path | None, rank: int) -> Path | None:
    """``out.json`` -> ``out.rank1.json`` (``None`` and ``-``, stdout, as they are)."""
    if path is None or str(path) == "-":
        return path
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


class QuietTarget(OutputTarget):
    """The terminal of a rank other than 0: nothing is printed there."""

    def write(self, rendered: Rendered) -> None:
        return None


def rank_targets(job: Launch, asked: OutputTarget, *,
                 gather: bool) -> tuple[OutputTarget, OutputTarget]:
    """Where this rank writes its own trace and the merged one: ``-o out.json`` becomes
    ``out.rankN.json`` and the merged ``out.json`` (rank 0's); the terminal is rank 0's
    alone, and with ``--gather`` it shows the merged view only."""
    to_terminal = asked.path is None or str(asked.path) == "-"
    own = rank_path(asked.path, job.rank)
    quiet = to_terminal and (job.rank != 0 or gather)
    target = (QuietTarget if quiet else OutputTarget)(own, asked.no_color, asked.width)
    merged = QuietTarget(asked.path, asked.no_color, asked.width) \
        if to_terminal and job.rank != 0 else asked
    return target, merged


@contextmanager
def job_group(job: Launch | None, *, gather: bool) -> Iterator[None]:
    """The job's process group while the block runs, for ``--gather``: the one the
    model's factory made, or one initialised here (gloo: the traces travel as Python
    objects) and destroyed at the end."""
    import torch.distributed as dist

    started = job is not None and gather and not dist.is_initialized()
    if started:
        dist.init_process_group("gloo")
    try:
        yield
    finally:
        if started:
            dist.destroy_process_group()


def mark_rank(result: Trace, job: Launch) -> None:
    """Put the rank in the trace's ``meta`` when no process group told the tracer."""
    result.meta.setdefault("rank", job.rank)
    result.meta.setdefault("world_size", job.world_size)


def write_gathered(result: Trace, fmt: str, target: OutputTarget, *,
                   rank: int) -> GatheredTrace | None:
    """Gather every rank's trace on rank 0 and write the merged view there (a
    collective: every rank calls it, inside :func:`job_group`); the merged trace on
    rank 0, ``None`` on the others."""
    gathered: GatheredTrace | None = result.gather(dst=0)
    if rank == 0 and gathered is not None:
        text = gathered.to_json() if fmt == "json" else str(gathered)
        target.write(Rendered.of_text(text))
    return gathered

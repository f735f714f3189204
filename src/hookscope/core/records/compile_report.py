"""What ``torch.compile`` made of a model: :class:`CompileReport` and its parts.

``trace(..., compiled=True)`` (``api/compiled.py``) stores the report's JSON data in
``trace.meta["compile"]``, so the trace document carries it unchanged;
:meth:`CompileReport.of` reads it back as records for the renderers and the user.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CompileReport", "GraphBreak", "Recompile"]


@dataclass(frozen=True)
class GraphBreak:
    """One graph break, as ``torch._dynamo.explain`` reported it.

    Attributes:
        reason: dynamo's reason (its first line names the cause; the rest explains it).
        paths: the module whose ``forward`` holds the break; several when modules of
            one class share that code and the break could not be told apart; empty
            when no frame of dynamo's user stack lies in a module's ``forward``.
        file, line, function: where the break happens (the innermost user frame).
    """

    reason: str
    paths: tuple[str, ...]
    file: str | None
    line: int | None
    function: str | None

    @property
    def path(self) -> str | None:
        """The one module path, or ``None`` when the break names several or none."""
        return self.paths[0] if len(self.paths) == 1 else None


@dataclass(frozen=True)
class Recompile:
    """A guard that failed when dynamo compiled a frame of the model again.

    Attributes:
        paths: the modules whose ``forward`` holds the frame.
        file, line: the frame's source (its first line, or where a resume function
            dynamo made after a graph break starts).
        reason: the guard that failed, as dynamo recorded it (``"tensor 'x' size
            mismatch at index 0. expected 3, actual 5"``).
    """

    paths: tuple[str, ...]
    file: str
    line: int
    reason: str


@dataclass(frozen=True)
class CompileReport:
    """What ``torch.compile``'s frontend (dynamo) made of one run of the model.

    Attributes:
        graphs: how many graphs dynamo captured (one more than the graph breaks).
        ops: how many ops those graphs hold.
        breaks: every graph break, in the order dynamo met them.
        recompiles: the failed guards dynamo recorded for the model's frames in this
            process before the analysis (recompilations of the user's compiled model).
        guards: how many guards the captured graphs carry.
        error: dynamo's own failure, when it could not compile the model at all.
    """

    graphs: int
    ops: int
    breaks: tuple[GraphBreak, ...]
    recompiles: tuple[Recompile, ...]
    guards: int
    error: str | None = None

    def to_data(self) -> dict[str, Any]:
        """The JSON data (``trace.meta["compile"]``): lists, as a document read back has."""
        data: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> CompileReport:
        """The report from its JSON data."""
        return cls(
            graphs=int(data["graphs"]), ops=int(data["ops"]), guards=int(data["guards"]),
            breaks=tuple(GraphBreak(**{**b, "paths": tuple(b["paths"])})
                         for b in data["breaks"]),
            recompiles=tuple(Recompile(**{**r, "paths": tuple(r["paths"])})
                             for r in data["recompiles"]),
            error=data.get("error"),
        )

    @classmethod
    def of(cls, meta: dict[str, Any]) -> CompileReport | None:
        """The report a trace's ``meta`` holds, or ``None`` (not run with
        ``compiled=True``)."""
        data = meta.get("compile")
        return cls.from_data(data) if isinstance(data, dict) else None

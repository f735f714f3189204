"""What :func:`hookscope.memory_plan` returns: the peak, per module, and the timeline.

A :class:`MemoryPlan` is plain data: numbers per module and per category, the
timeline of bytes allocated over the step, and the options it was planned with. It
prints as a folded table (``memory_plan/table.py``), shows as HTML in Jupyter, and
exports to a dict, JSON, CSV and a pandas DataFrame (one row per module).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from hookscope.core.model.structure import ModelInfo
from hookscope.errors import MissingDependencyError
from hookscope.memory_plan.accounting import ModuleBytes


class MemoryPoint(NamedTuple):
    """One moment of the timeline: bytes allocated after a change, and where."""

    bytes: int
    phase: str
    module: str


@dataclass(frozen=True)
class ModuleMemory:
    """One module's row (its submodules' bytes included), per rank.

    Attributes:
        path: the module's fully qualified name (``""``: the model).
        class_name: its class.
        parameters: bytes of the parameters it holds.
        gradients: bytes of their gradients.
        optimizer_states: bytes of their optimizer states.
        saved_activations: bytes allocated in its forward and saved for backward.
        peak: the most bytes allocated (everything alive) while it ran.
        peak_phase: the phase of that moment (``""``: it never ran).
    """

    path: str
    class_name: str
    parameters: int
    gradients: int
    optimizer_states: int
    saved_activations: int
    peak: int
    peak_phase: str

    @classmethod
    def of(cls, path: str, class_name: str, b: ModuleBytes) -> ModuleMemory:
        """The row of module ``path`` from its accounted bytes."""
        return cls(path, class_name, b.parameters, b.gradients, b.optimizer_states,
                   b.saved_activations, b.peak, b.peak_phase)


@dataclass(frozen=True)
class MemoryPlan:
    """The memory of one step, planned on fake tensors (per rank when ``shards > 1``).

    Attributes:
        peak_bytes: bytes alive at the peak: every storage (parameters, buffers, inputs,
            gradients, optimizer states, saved activations, temporaries).
        peak_phase: ``"forward"``, ``"backward"`` or ``"optimizer"``.
        peak_module: the innermost module running at the peak (``""``: the model, or
            code outside any module: the loss, the optimizer's own bookkeeping).
        at_peak: bytes alive at the peak, per category.
        modules: one row per module, in ``named_modules()`` order.
        timeline: the bytes allocated after every allocation and free of the step.
        training: a training step (forward, backward, optimizer) or inference.
        optimizer: the optimizer's class name (``None``: inference or none).
        dtype: the floating dtype planned with (``None``: the model's own).
        autocast: the autocast dtype (``None``: none).
        shards: ranks that parameters, gradients and optimizer states are sharded over.
        micro_batches: gradient accumulation steps per optimizer step.
        batch_size: the first dimension of the inputs (``None``: no tensor input).
        checkpointed: the modules whose activations are recomputed in backward.
        device_memory: the budget the batch size was searched for (``None``: none).
        max_batch_size: the largest batch size that fits ``device_memory``.
        notes: what the plan leaves out.
    """

    peak_bytes: int
    peak_phase: str
    peak_module: str
    at_peak: dict[str, int]
    modules: list[ModuleMemory]
    timeline: list[MemoryPoint] = field(repr=False)
    training: bool
    optimizer: str | None
    dtype: str | None
    autocast: str | None
    shards: int
    micro_batches: int
    batch_size: int | None
    checkpointed: list[str]
    device_memory: int | None = None
    max_batch_size: int | None = None
    notes: list[str] = field(default_factory=list)
    structure: ModelInfo | None = field(default=None, repr=False, compare=False)

    def headline(self) -> str:
        """The one-line answer: ``peak 41.3 GiB in backward at layers.17.mlp; fits 80 GiB
        with batch <= 12``."""
        from hookscope.memory_plan.table import headline

        return headline(self)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the totals, one row per module (``modules``) and the timeline."""
        data = {k: v for k, v in asdict(self).items() if k != "structure"}
        data["timeline"] = [list(p) for p in self.timeline]
        return data

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=indent)

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per module (the CSV and DataFrame rows)."""
        return [asdict(m) for m in self.modules]

    def to_csv(self) -> str:
        """One line per module, with a header line."""
        import csv
        import io

        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(ModuleMemory.__dataclass_fields__),
                                lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows())
        return out.getvalue()

    def to_dataframe(self) -> Any:
        """One row per module as a pandas DataFrame (``pip install pandas``)."""
        try:
            import pandas as pd
        except ImportError as e:
            raise MissingDependencyError("pandas", "pandas", needed_for="to_dataframe") from e
        return pd.DataFrame(self.rows())

    def table(self, *, ascii: bool = False, fold: bool = True) -> Any:
        """The folded table (a :class:`~hookscope.render.table.GridTable`)."""
        from hookscope.memory_plan.table import plan_table

        return plan_table(self, ascii=ascii, fold=fold)

    def plot(self, path: str | None = None) -> Any:
        """The timeline as a matplotlib figure (``hookscope[plot]``), saved to ``path``."""
        from hookscope.memory_plan.plot import plot_timeline

        return plot_timeline(self, path)

    def __str__(self) -> str:
        return str(self.table(ascii=True))  # its title is the answer line

    def _repr_html_(self) -> str:
        html: str = self.table()._repr_html_()  # its caption is the answer line
        return html

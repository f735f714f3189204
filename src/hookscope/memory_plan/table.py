"""The memory plan as a folded module table, with its one-line answer first.

Rows are :func:`hookscope.inspect`'s tree folded as the structure table folds it
(``render/fold.py``): a run of identical blocks is its first block and one row for the
rest, their bytes summed and their peaks the highest. The caption holds the bytes
alive at the peak per category and the timeline of the step as a sparkline, one
segment per phase, drawn from the same data as the peak.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hookscope.render.fold import FoldedModules, structure_rows
from hookscope.render.grid import Grid, GridColumn, folded_caption
from hookscope.render.labels import structure_fold_text, structure_text
from hookscope.render.table import GridTable, tree_column
from hookscope.render.units import format_bytes

if TYPE_CHECKING:
    from hookscope.memory_plan.result import MemoryPlan, MemoryPoint, ModuleMemory

_BARS = "▁▂▃▄▅▆▇█"
_ASCII_BARS = "_.-~=+*#"
_SPARK_WIDTH = 36
_TRAINING_ONLY = frozenset({"gradients", "optimizer_states", "saved_activations"})
_LABELS = {"parameters": "params", "buffers": "buffers", "inputs": "inputs",
           "gradients": "grads", "optimizer_states": "optimizer",
           "saved_activations": "saved", "temporaries": "temporaries",
           "gathered": "gathered"}


def headline(plan: MemoryPlan) -> str:
    """``peak 41.3 GiB in backward at layers.17.mlp; fits 80 GiB with batch <= 12``."""
    where = f" at {plan.peak_module}" if plan.peak_module else ""
    rank = f" per rank of {plan.shards}" if plan.shards > 1 else ""
    text = f"peak {format_bytes(plan.peak_bytes)}{rank} in {plan.peak_phase}{where}"
    if plan.device_memory is not None:
        budget = format_bytes(plan.device_memory)
        if plan.max_batch_size:
            text += f"; fits {budget} with batch <= {plan.max_batch_size}"
        else:
            text += f"; does not fit {budget}, not even with batch 1"
    return text


def sparkline(points: Sequence[MemoryPoint], top: int, *, ascii: bool) -> str:
    """``forward ▁▂▅▇ backward █▅▂ optimizer ▃▃``: the highest bytes of each stretch of
    the timeline, per phase, scaled to ``top``."""
    bars = _ASCII_BARS if ascii else _BARS
    phases: list[tuple[str, list[int]]] = []
    for p in points:
        if p.phase == "start":
            continue
        if not phases or phases[-1][0] != p.phase:
            phases.append((p.phase, []))
        phases[-1][1].append(p.bytes)
    total = sum(len(v) for _, v in phases) or 1
    parts = []
    for phase, values in phases:
        cells = max(1, round(_SPARK_WIDTH * len(values) / total))
        step = len(values) / cells
        highs = [max(values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)])
                 for i in range(cells)]
        line = "".join(bars[min(len(bars) - 1, int(len(bars) * h / max(top, 1)))] for h in highs)
        parts.append(f"{phase} {line}")
    return " ".join(parts)


def _sum(mods: Sequence[ModuleMemory], name: str) -> str:
    total = sum(getattr(m, name) for m in mods)
    return format_bytes(total) if total else ""


def plan_table(plan: MemoryPlan, *, ascii: bool = False, fold: bool = True) -> GridTable:
    """The table of ``plan`` (see the module docstring)."""

    def build(ascii: bool) -> Grid:
        info = plan.structure
        by_path = {m.path: m for m in plan.modules}
        rows = structure_rows(info, fold=fold) if info is not None else []
        labels, groups = [], []
        for row in rows:
            if isinstance(row, FoldedModules):
                labels.append(structure_fold_text(row.modules, ascii=ascii))
                groups.append([by_path[m.path] for m in row.modules if m.path in by_path])
            else:
                labels.append(structure_text(row, info.class_name if info else ""))
                groups.append([by_path[row.path]] if row.path in by_path else [])
        root = by_path.get("")

        def column(name: str, header: str, priority: int) -> GridColumn:
            footer = format_bytes(getattr(root, name)) if root is not None else ""
            return GridColumn(name, header, [_sum(g, name) for g in groups],
                              footer=footer, priority=priority)

        peaks = [max(g, key=lambda m: m.peak) if g else None for g in groups]
        cols = [
            tree_column(labels, footer="Total", header="Module"),
            GridColumn("class", "Class", [g[0].class_name if g else "" for g in groups],
                       numeric=False, priority=30),
            column("parameters", "Params", 90),
            column("gradients", "Grads", 80),
            column("optimizer_states", "Optimizer states", 70),
            column("saved_activations", "Saved activations", 85),
            GridColumn("peak", "Peak while running",
                       [format_bytes(p.peak) if p and p.peak else "" for p in peaks],
                       footer=format_bytes(plan.peak_bytes), priority=95),
            GridColumn("phase", "Peak phase", [p.peak_phase if p else "" for p in peaks],
                       numeric=False, priority=40),
        ]
        if not plan.training:  # no gradients, states or saved activations to show
            cols = [c for c in cols if c.name not in _TRAINING_ONLY]
        return Grid(cols, _caption(plan, rows, ascii=ascii), list(plan.notes),
                    title=headline(plan))

    return GridTable(build, ascii=ascii)


def _caption(plan: MemoryPlan, rows: Sequence[object], *, ascii: bool) -> list[str]:
    alive = ", ".join(f"{_LABELS[k]} {format_bytes(v)}" for k, v in plan.at_peak.items() if v)
    caption = [f"at the peak: {alive}",
               f"timeline: {sparkline(plan.timeline, plan.peak_bytes, ascii=ascii)}"]
    step = "training step" if plan.training else "inference"
    facts = [step, f"optimizer {plan.optimizer}" if plan.optimizer else "",
             f"dtype {plan.dtype}" if plan.dtype else "",
             f"autocast {plan.autocast}" if plan.autocast else "",
             f"batch {plan.batch_size}" if plan.batch_size is not None else "",
             f"{plan.shards} shards" if plan.shards > 1 else "",
             f"{plan.micro_batches} micro-batches" if plan.micro_batches > 1 else "",
             f"{len(plan.checkpointed)} modules checkpointed" if plan.checkpointed else ""]
    caption.append(", ".join(f for f in facts if f))
    runs = [r for r in rows if isinstance(r, FoldedModules)]
    if runs:
        hidden = sum(len(r.inside) for r in runs) - len(runs)
        caption.append(folded_caption(len(runs), hidden))
    return caption

"""The HTML report: one self-contained page of a trace, a summary, a structure or a
gradient monitor's history (``to_html``), and the same table and charts inline in
Jupyter.

``page.py`` assembles the page of a trace from ``calls_table.py`` (the module-call
tree, columns from the facts registry), ``figures.py`` (which charts the trace's facts
allow, drawn by ``svg.py``) and ``assets.py`` (the inline style sheet and script);
``others.py`` makes the pages of a structure and of a gradient history; every string
is escaped by ``markup.py``. :func:`write_html` writes a page to a file.
"""

from __future__ import annotations

from hookscope.render.report.others import history_report, structure_report, write_html
from hookscope.render.report.page import anomaly_report, trace_fragment, trace_report

__all__ = [
    "anomaly_report", "history_report", "structure_report", "trace_fragment", "trace_report",
    "write_html",
]

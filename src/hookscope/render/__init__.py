"""Renderers: turn records into terminal tables, JSON, CSV and HTML. They never touch a model.

Importing this package registers how a :class:`~hookscope.core.records.trace.Trace` shows
itself (``print(trace)``, ``trace.to_csv()``, ``trace.to_dataframe()``): the records
live in ``hookscope.core``, which does not import the render layer.
"""

from hookscope.core.model.structure import PRESENTERS as _STRUCTURE_PRESENTERS
from hookscope.core.records.trace import PRESENTERS as _PRESENTERS
from hookscope.render.export import trace_to_csv as _trace_to_csv
from hookscope.render.export import trace_to_dataframe as _trace_to_dataframe
from hookscope.render.report import structure_report as _structure_report
from hookscope.render.report import trace_fragment as _trace_fragment
from hookscope.render.report import trace_report as _trace_report
from hookscope.render.report import write_html as _write_html
from hookscope.render.table import render_structure_text as _render_structure_text
from hookscope.render.table import structure_html as _structure_html
from hookscope.render.timeline import trace_to_chrome_trace as _trace_to_chrome_trace
from hookscope.render.trace_table import render_trace_text as _render_trace_text
from hookscope.render.trace_table import trace_html as _trace_html

_PRESENTERS.update(
    text=_render_trace_text, csv=_trace_to_csv, dataframe=_trace_to_dataframe, html=_trace_html,
    report=_trace_report, notebook=_trace_fragment, write_html=_write_html,
)
_PRESENTERS.update(chrome_trace=_trace_to_chrome_trace)
_STRUCTURE_PRESENTERS.update(text=_render_structure_text, html=_structure_html,
                             report=_structure_report, write_html=_write_html)

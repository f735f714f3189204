"""Renderers: turn records into terminal tables, JSON, CSV and HTML. They never touch a model."""

# How a ModelInfo prints (``str(hookscope.inspect(model))``): the records live in
# ``hookscope.core``, which does not import the render layer.

from hookscope.core.structure import PRESENTERS as _STRUCTURE_PRESENTERS
from hookscope.render.table import render_structure_text as _render_structure_text

_STRUCTURE_PRESENTERS.update(text=_render_structure_text)

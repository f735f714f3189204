"""Escaping for the HTML report: every string from the model or the user goes through here.

Module paths, class names, ``extra_repr``, exception messages and file paths are the
model's or the user's text: a module may be named ``<img src=x onerror=alert(1)>``.
:func:`text` escapes text and attribute values (quotes included), and
:func:`script_json` makes JSON safe inside a ``<script>`` element, where HTML escaping
does not apply: ``<``, ``>`` and ``&`` become ``\\u003c``..., so no ``</script>`` can end
the element early, and U+2028/U+2029 (line ends to older JavaScript parsers) are
escaped too.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

__all__ = ["attr", "script_json", "tag", "text"]

_SCRIPT_SAFE = str.maketrans({
    "<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
    "\u2028": "\\u2028", "\u2029": "\\u2029",
})


def text(value: object) -> str:
    """``value`` as HTML text or a quoted attribute value (``&<>"'`` escaped)."""
    return escape(str(value), quote=True)


def attr(name: str, value: object) -> str:
    """`` name="value"`` with the value escaped (``None``: nothing)."""
    return "" if value is None else f' {name}="{text(value)}"'


def tag(name: str, body: str = "", **attrs: object) -> str:
    """``<name a="..">body</name>``: ``body`` is markup already; attribute values are
    escaped (``class_`` is written ``class``, ``data_v`` ``data-v``)."""
    written = "".join(attr(k.rstrip("_").replace("_", "-"), v) for k, v in attrs.items())
    return f"<{name}{written}>{body}</{name}>"


def script_json(value: Any) -> str:
    """``value`` as JSON that can sit inside ``<script type="application/json">``."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False).translate(_SCRIPT_SAFE)

"""The records a trace is made of: calls (``trace``), the values probes store
(``values``, ``facts``), the model's tree (``module_records``), and their JSON
(``serialize``, ``value_json``, ``structure_json``). Plain data: they never touch a model.

Importing the package gives :class:`~hookscope.core.records.trace.Trace` its JSON
codec: ``serialize`` builds traces, so ``trace`` cannot import it.
"""

from hookscope.core.records.serialize import trace_from_json as _trace_from_json
from hookscope.core.records.serialize import trace_to_json as _trace_to_json
from hookscope.core.records.trace import JSON_CODEC as _JSON_CODEC

_JSON_CODEC.update(to_json=_trace_to_json, from_json=_trace_from_json)

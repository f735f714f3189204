"""The public API's one-call entry points and what sits beside them.

``tracing`` (``trace``, ``summary``, the ``Tracer`` with the built-in probes),
``inspection`` (``inspect``), ``aggregate`` (``median_times``) and
``annotated_repr``: the layer where a model meets the renderers.
"""

"""The records a trace is made of: calls (``trace``), the values probes store
(``values``, ``facts``), the model's tree (``modules``), and their JSON (``serialize``,
``value_json``, ``structure_json``). Plain data: they never touch a model."""

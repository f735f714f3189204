"""The built-in rules, one module per family; importing this package registers them.

- ``containers``: HS1xx, modules and parameters kept in plain Python containers.
- ``tensor_attributes``: HS2xx, plain tensor attributes, buffers, tied and frozen parameters.
- ``initial_values``: HS3xx, suspicious initial values (non-finite, constant weights).
- ``devices``: HS4xx, mixed devices and floating dtypes.
- ``dynamic``: HS5xx, what a forward (and backward) pass shows.
"""

import hookscope.lint.checks.containers
import hookscope.lint.checks.devices
import hookscope.lint.checks.dynamic
import hookscope.lint.checks.initial_values
import hookscope.lint.checks.tensor_attributes  # noqa: F401  (each import registers its rules)

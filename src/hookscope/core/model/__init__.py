"""The model walked without running it: its module table and structure, the
state a run puts back (flags, buffers, lazy modules), and module selectors.
"""

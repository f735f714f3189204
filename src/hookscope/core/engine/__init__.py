"""The engine: the tracer, the run it makes, and the hooks and stand-in through
which a run observes module calls, their backward and a checkpoint's recompute.
"""

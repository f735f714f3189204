"""Two runs side by side: which call of one is which call of the other
(``matching``), and how the facts of two finished traces differ (``diff*``).
"""

from hookscope.compare.matching import CallMatching, match_calls

__all__ = ["CallMatching", "match_calls"]

"""Two runs side by side: which call of one is which call of the other
(``matching``), and how the facts of two finished traces differ (``diff*``).
"""

from hookscope.compare.diff_calls import CallDiff
from hookscope.compare.diff_facts import FactChange
from hookscope.compare.diff_result import TraceDiff, diff
from hookscope.compare.matching import CallMatching, match_calls

__all__ = ["CallDiff", "CallMatching", "FactChange", "TraceDiff", "diff", "match_calls"]

"""The rule by which a round is *disturbed*, declared once beside the tables that count such rounds
(``disturbed_rounds``): :mod:`muon_repro.analysis.estimators` applies it, the tables' column descriptions and the
report's Method state it.

A round whose median step time (slowest rank) lies more than :data:`DISTURBED_MADS` scaled median absolute
deviations, and more than :data:`DISTURBED_MIN_SHIFT` of the median, from the median of the run's rounds is left out,
where the run has at least :data:`MIN_ROUNDS_JUDGED` rounds (two rounds cannot say which of them is the odd one).

Plain Python: any module can use it.
"""

from __future__ import annotations

# At 3 MADs and 10% the rule left out ordinary rounds of a run scattering 10% per round (the noisier committed CPU
# runs): the ratio's 95% interval then covered 90-92% (docs/method.md's coverage table, ratio_unshared); at 5 and 25%,
# 94-95%. A round slowed 2x is still left out where a run's rounds are steady; among noisy ones the interval widens.
DISTURBED_MADS = 5.0
DISTURBED_MIN_SHIFT = 0.25
MAD_SCALE = 1.4826  # MAD to standard deviation, for normal data
MIN_ROUNDS_JUDGED = 3


def rule_said() -> str:
    """The rule in words, with its numbers: ``beyond 5 scaled MADs and 25% of the run's median round``."""
    return f"beyond {DISTURBED_MADS:g} scaled MADs and {DISTURBED_MIN_SHIFT:.0%} of the run's median round"

"""muon_repro: a reproducibility artifact for Distributed Muon (MoonshotAI, arXiv 2502.16982).

Subpackages, in the one direction data flows:
``optim`` and ``parallel`` (the optimizers, the process grid, collectives with a byte ledger),
``model`` (a tensor-parallel GPT), ``bench`` (runs -> traces + metrics), ``analysis``
(traces -> tables), ``report`` (tables -> figures + report), ``hub`` (bundle -> Hugging Face).
"""

__version__ = "0.1.0"

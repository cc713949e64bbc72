"""muon_repro: a reproducibility artifact for Distributed Muon (MoonshotAI, arXiv 2502.16982).

Data flows one way: ``bench`` (runs -> traces + metrics) -> ``analysis`` (traces -> tables) ->
``report`` (tables -> figures + report) -> ``dataset`` (the bundle) -> ``hub`` (bundle -> Hugging Face).
Every package and module, with what it holds: docs/architecture.md's module map, generated from their
docstrings (:mod:`muon_repro.module_map`).
"""

__version__ = "0.1.0"

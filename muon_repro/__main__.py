"""``python -m muon_repro``: the ``muon-repro`` command (:mod:`muon_repro.cli`)."""

from muon_repro.cli import main

raise SystemExit(main())

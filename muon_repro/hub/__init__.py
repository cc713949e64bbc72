"""The dataset side: bundle -> Hugging Face Hub -> reader.

One module per job::

    naming, meta        repository ids, versions, tags; what a bundle says about itself
    manifest, fsutil    MANIFEST.sha256 (sha256 + size per file); atomic writes, hashing
    tables_doc, run_info, citation, card
                        what the card documents: tables and columns, runs and environment,
                        CITATION.cff and BibTeX; the card itself (templates/dataset_card.md.j2)
    croissant           croissant.json: Croissant 1.1 record sets, files and responsible-AI fields
    bundle              ``muon-repro bundle``: assemble exactly what gets published
    verify              ``muon-repro verify``: checksums, every config loads, every trace parses
    plan, publish       ``muon-repro publish``: plan against the remote head, one commit, one tag
    download            ``muon-repro download``: one version, then verify
    cli                 the subcommands

The fake Hub the tests publish to is a test double and lives outside the runtime surface, in
:mod:`muon_repro.testing` (``python -m muon_repro.testing.fake_hub``); nothing here imports it.

Importing this package imports nothing heavy; ``huggingface_hub`` and ``datasets`` are
imported by the functions that need them.
"""

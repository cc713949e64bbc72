"""The dataset side: bundle -> Hugging Face Hub -> reader.

One module per job::

    naming, meta        repository ids, versions, tags; what a bundle says about itself
    manifest, fsutil    MANIFEST.sha256 (sha256 + size per file); atomic writes, hashing
    tables_doc, run_info, citation, card
                        what the card documents: tables and columns, runs and environment,
                        CITATION.cff and BibTeX; the card itself (templates/dataset_card.md.j2)
    bundle              ``muon-repro bundle``: assemble exactly what gets published
    verify              ``muon-repro verify``: checksums, every config loads, every trace parses
    plan, publish       ``muon-repro publish``: plan against the remote head, one commit, one tag
    download            ``muon-repro download``: one version, then verify
    fake_hub(_app, _store)  a standard-library fake Hub on 127.0.0.1 for tests (a test double):
                        server, HTTP routes, storage
    cli                 the subcommands

Importing this package imports nothing heavy; ``huggingface_hub`` and ``datasets`` are
imported by the functions that need them.
"""

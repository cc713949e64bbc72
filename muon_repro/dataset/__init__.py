"""The dataset: what gets published, described and checked: the dataset card, ``CITATION.cff``,
``croissant.json``, the bundle, its manifest and ``verify`` (``muon-repro card``, ``bundle``, ``verify``).
It reads the tables (through :mod:`muon_repro.tables`) and the artifact folders; after analysis, only :mod:`verify` opens
run folders and traces again, because checking them is its job.

    naming, meta        repository ids, versions, tags; what a bundle says about itself
    manifest            MANIFEST.sha256: sha256 and size of every file
    tables_doc          what the card says of each table and its columns
    run_info            the card's runs: how each group was recorded, on which machines
    citation            CITATION.cff and BibTeX
    croissant           croissant.json: Croissant 1.1 record sets, files, responsible-AI fields
    card                the dataset card (templates/dataset_card.md.j2), the Hub's README.md
    bundle              ``muon-repro bundle``: exactly what gets published, swapped in whole
    verify              ``muon-repro verify``: checksums, every table loads, every trace parses
    cli                 ``muon-repro bundle | card | verify``

It imports neither torch nor the benchmark; ``datasets`` is imported by the functions that need it.
"""

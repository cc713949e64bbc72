"""Contributions: runs recorded on other hardware, offered and checked as Hub pull requests.
Everything here handles strangers' files, so every file is untrusted input.

    untrusted       a stranger's text printed escaped; the name rules; rank lists as ranges
    limits          files and bytes per pull request, each file's size, config.json's number ranges
    config_check    a contributed config.json's numbers and names, checked before anything is sized by them
    run_check       one run folder checked as contribute and review both check it
    pr_checks       a pull request's changes: the paths it adds (checked before any download), its manifest lines
    pr_lookup       the Hub's 404s (no such repository, branch or pull request) as one sentence
    contribute      ``muon-repro contribute``: check your runs, open a pull request
    review          ``muon-repro review``: check a pull request, analyze it with main's runs
                    of the same profile, and show the claims before and after
    claims_diff     the claims before and after, row by row
    cli             the two subcommands
"""

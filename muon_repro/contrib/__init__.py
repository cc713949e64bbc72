"""Contributions: runs recorded on other hardware, offered and checked as Hub pull requests.
Everything here handles strangers' files, so every file is untrusted input.

    run_check       one run folder checked as contribute and review both check it
    pr_checks       a pull request's changes: the paths it adds, its manifest lines
    contribute      ``muon-repro contribute``: check your runs, open a pull request
    review          ``muon-repro review``: check a pull request, analyze it with main's runs
                    of the same profile, and show the claims before and after
    claims_diff     the claims before and after, row by row
    cli             the two subcommands
"""

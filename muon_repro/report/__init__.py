"""Figures and the report, from ``metrics/`` alone: the figures (matplotlib, PNG + SVG, one function
per figure: a table in, a path out) and the report (Markdown and PDF, Jinja2 + WeasyPrint).

Tables under ``metrics/`` in, PNG/SVG figures and ``report.md`` / ``report.pdf`` out. Nothing here opens a
run directory or a trace, or imports torch, the model, the optimizers or the analysis: data flows one way,
and ``metrics/`` alone is enough to redraw and rewrite everything.

Data flow, one module per step::

    data        metrics/<table>.parquet -> ReportData (checked: a missing table, column or value -> error naming it)
    selection   which runs a figure or table shows, their order and labels
    derive      small per-run reductions of a table (state, bytes per phase, loss, typical step of the typical trial,
                one step's timeline, the optimizer step decomposed per rank; trials pooled or picked, never mixed)
    plotting    the figures' toolkit: a figure at the page's width, title and takeaway, legend, grouped bars, saving
    figures     the figure catalogue (FIGURES) and the time and loss figures; bytes_figures, timeline_figures,
                regime_figures and profile_figures draw others, and a section's own figures lie in its *_section
                module: one function per figure, tables in, PNG + SVG path out (colours: style; phase names:
                muon_repro.phases)
    formatting  numbers as the report writes them (ms, %, ×, MB, MiB, GiB); a missing value -> error naming it
    *_section   one report section each, its context and the figures only it draws: abstract, study (and its
                figure), setup, results, checks, claims, decomposition, pipeline (its cost model, its figure),
                convergence (its figures), caveats (regimes' bullets, limitations), regimes (its tables; its figures
                are regime_figures'), gpu (its figure), reproduce (and cite)
    context     ReportData + figures -> the whole template context, assembled from the sections (strings only)
    render      context -> report.md / report.html / report.pdf (Jinja2, StrictUndefined, WeasyPrint)
    build       the two stages: make_figures(metrics, out), write_report(metrics, figures, out, formats)
    cli         ``muon-repro figures``, ``muon-repro report`` (argument parsing around build)
"""

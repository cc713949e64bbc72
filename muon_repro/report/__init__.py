"""Figures and the report: the analysis tables (and each run's directory) in, PNG/SVG figures
and ``report.md`` / ``report.pdf`` out.

Data flow, one module per step::

    data        tables under metrics/ + run directories -> ReportData (checked: missing -> error naming it)
    analytic    a run's config -> analytic bytes per optimizer phase (DESIGN.md section 4)
    timeline    rank traces -> one step's phase intervals on a common clock
    figures     one function per figure, frames in, PNG + SVG path out (colours: style)
    build       the frames the figures need beyond the tables; make_figures()
    context     ReportData + figures -> the template context (formatted strings only)
    render      context -> report.md / report.html / report.pdf (Jinja2, StrictUndefined, WeasyPrint)
    cli         ``muon-repro figures``, ``muon-repro report``
"""

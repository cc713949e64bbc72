"""Text a run recorded, written into a document as data, never as markup.

A contributed run folder passes review with whatever text its ``config.json`` and ``environment.json``
hold (a command with a newline and a code fence, a host or GPU name with ``<script>`` or an ANSI escape),
and the analysis carries it into the tables. From there it reaches the dataset card, the report
(Markdown; HTML and PDF), the README's generated blocks. Each function here writes such text for one
medium, and leaves text without markup byte for byte as it is, so the documents made from ordinary runs
do not change:

    one_line         a value on one line (a command, a code span): controls and newlines as visible escapes
    block_text       lines shown in a code block: controls visible, newlines and tabs kept
    code_fence       the backtick fence of a code block: longer than any backtick run in the block
    inline_code      a code span the text cannot close
    shell_word       one word of a shell command (shlex-quoted, on one line)
    markdown_text    text wholly a run's, in Markdown text or a table cell: every Markdown special escaped
    markdown_inline  a sentence mixing the report's own Markdown with run text: no HTML, link, image, entity
                     or block can start in it; emphasis and code spans stay (they may be the report's own)
    markdown_cell    :func:`markdown_inline` for a table cell: ``|`` escaped
    html_inline      the HTML of such a sentence: every value escaped, its code spans as ``<code>``

The report's HTML environment autoescapes every value (``markupsafe.escape``, as ``html.escape``) and shows
control characters with :func:`block_text`; its sentences and cells go through :func:`html_inline`, so that a
code span reads as code in the PDF as in the Markdown. The
Croissant file holds no run text, and ``json.dumps`` writes what it holds. This module imports nothing
of the package, so the dataset layer (the card) and the report layer both use it.
"""

from __future__ import annotations

import re
import shlex
import unicodedata

from markupsafe import Markup, escape

# Characters that move a terminal's cursor, colour it, reorder text (bidi overrides) or break a line:
# C0/C1 controls and DEL (Cc), format characters (Cf), line and paragraph separators (Zl, Zp).
CONTROL_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")
NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
MIN_FENCE = 3  # CommonMark: a code fence is at least 3 backticks

_BACKTICKS = re.compile(r"`+")
_WHITESPACE = re.compile(r"\s+")
# A backslash before ASCII punctuation escapes it; one in the text is doubled where it would (before punctuation,
# or last: before the document's next character), so it cannot un-escape our '|' or eat our markup.
_CONSUMED_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~]|$)")
# Raw HTML, HTML comments and autolinks all start with '<' followed by a letter, '/', '!' or '?'.
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
# CommonMark's entity and character references: up to 7 decimal or 6 hex digits (U+10FFFF), names up to 32 chars.
_ENTITY = re.compile(r"&(?=#[0-9]{1,7};|#[xX][0-9A-Fa-f]{1,6};|[A-Za-z][A-Za-z0-9]{0,31};)")
# A code span (CommonMark): a backtick run, then the shortest text up to a run of the same length.
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_LINK_CLOSE = re.compile(r"\](?=[(\[])")  # '](' and '][' close an inline or reference link (or an image)
# What makes a line a block other than a paragraph: ATX heading, block quote, list item, thematic break,
# code fence, link reference definition or task box. Escaping its first character makes it text.
_BLOCK_START = re.compile(r"#{1,6}(?: |$)|>|[-+*](?: |$)|(?:-(?: *-){2,}|\*(?: *\*){2,}|_(?: *_){2,}) *$|```|~~~|\[")
_ORDERED_ITEM = re.compile(r"\d{1,9}(?=[.)](?: |$))")  # CommonMark: an ordered list marker has at most 9 digits
# Markdown specials escaped in text wholly a run's: '&', '<', '>' as entities (so no tag, autolink or
# entity), the rest with a backslash; '_' only where it could emphasize (not inside a word: x86_64 stays).
_TEXT_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_TEXT_SPECIALS = re.compile(r"[\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def _is_control(char: str) -> bool:
    return unicodedata.category(char) in CONTROL_CATEGORIES


def _visible(char: str) -> str:
    """One control character as its escape: ``\\n``, ``\\t``, ``\\x1b``, ``\\u202e``."""
    return NAMED_ESCAPES.get(char) or ascii(char)[1:-1]


def _controls_visible(text: str, keep: str = "") -> str:
    if all(" " <= c <= "~" or c in keep for c in text):  # printable ASCII: the usual case, unchanged
        return text
    return "".join(_visible(c) if c not in keep and _is_control(c) else c for c in text)


def one_line(value: object) -> str:
    """``value`` as one line: every control character, newline and tab included, as a visible escape.
    A command recorded with a newline shows as ``...\\n...``: one command, one line, nothing after it read as more."""
    return _controls_visible(str(value))


def block_text(value: object) -> str:
    """Lines for a code block: control characters visible (an ANSI escape cannot reach a terminal that shows
    the file), newlines and tabs kept, since the block is multi-line on purpose."""
    return _controls_visible(str(value), keep="\n\t")


def code_fence(value: object) -> str:
    """The backtick fence for a code block holding ``value``: one longer than any backtick run in it (at least
    :data:`MIN_FENCE`), so no line of the content can close the block."""
    longest = max((len(run) for run in _BACKTICKS.findall(str(value))), default=0)
    return "`" * max(MIN_FENCE, longest + 1)


def inline_code(value: object, in_table: bool = False) -> str:
    """``value`` as a Markdown code span on one line: delimited by a backtick run longer than any in it, padded
    with a space where it starts or ends with a backtick (or with a space, which the renderer would strip);
    ``in_table``: ``|`` escaped, as a table cell needs even inside a code span. Empty: nothing (two backticks would
    show as such, not as an empty span)."""
    body = one_line(value)
    if not body:
        return ""
    ticks = "`" * (max((len(run) for run in _BACKTICKS.findall(body)), default=0) + 1)
    padded = body[:1] in ("`", " ") or body[-1:] in ("`", " ")
    if padded and body.strip():
        body = f" {body} "
    if in_table:
        body = body.replace("|", "\\|")
    return f"{ticks}{body}{ticks}"


def shell_word(value: object) -> str:
    """``value`` as one word of a shell command shown for copying: on one line, quoted by shlex where it is not
    a plain word (a hexadecimal commit or a URL stays as it is)."""
    return shlex.quote(one_line(value))


def _one_spaced(value: object) -> str:
    """Whitespace runs (newlines included) as one space: a value stays on its line (as cells always did)."""
    return _WHITESPACE.sub(" ", str(value)).strip()


def _line_start_as_text(text: str) -> str:
    """``text`` that cannot start a block when it begins a line: its first marker character escaped."""
    ordered = _ORDERED_ITEM.match(text)
    if ordered:
        return f"{text[: ordered.end()]}\\{text[ordered.end() :]}"
    return f"\\{text}" if _BLOCK_START.match(text) else text


def markdown_text(value: object) -> str:
    """Text wholly a run's (a host name, a version, an environment key) as Markdown text or a table cell's
    content: on one line, every character Markdown could read as markup escaped, so it shows as written."""
    text = _TEXT_SPECIALS.sub(lambda m: "\\" + m.group(), _one_spaced(value))
    text = "".join(_TEXT_ENTITIES.get(c, c) for c in text)
    return _line_start_as_text(_controls_visible(text))  # after the specials: '\\x1b' stays one escape


def markdown_inline(value: object, line_start: bool = True) -> str:
    """A sentence that mixes the document's own Markdown (code spans, bold) with run text, made structure-safe:
    on one line, no raw HTML or autolink (``<`` before a letter, ``/``, ``!``, ``?``), no entity, no link or
    image (``](``, ``][``), no backslash that would eat our next character; ``line_start``: no block
    (heading, quote, list item, fence) where it begins a line. Emphasis and code spans are left: the
    document's own are in the same string. Text wholly a run's should use :func:`markdown_text`."""
    text = _CONSUMED_BACKSLASH.sub(r"\\\\", _one_spaced(value))
    text = _TAG_START.sub("&lt;", _ENTITY.sub("&amp;", text))  # entities first: '&lt;' is ours, not the text's
    text = _controls_visible(_LINK_CLOSE.sub(r"\\]", text))
    return _line_start_as_text(text) if line_start else text


def html_inline(value: object) -> Markup:
    """A sentence as :func:`markdown_inline` takes it, as HTML: escaped, control characters visible, and each code
    span (the report's own, like the run's in the Markdown) a ``<code>`` element."""
    if isinstance(value, Markup):  # a macro's own output: HTML already
        return value
    text = _controls_visible(str(value))
    out, start = [], 0
    for span in _CODE_SPAN.finditer(text):
        code = span[2][1:-1] if len(span[2]) > 2 and span[2][0] == span[2][-1] == " " else span[2]
        out += [escape(text[start : span.start()]), Markup("<code>%s</code>") % code]
        start = span.end()
    out.append(escape(text[start:]))
    return Markup("").join(out)


def markdown_cell(value: object) -> str:
    """:func:`markdown_inline` for a table cell: ``|`` escaped so the cell keeps its column (cells never begin a
    line, so ``-19%`` or ``[0.5, 0.5]`` stay as they are)."""
    return markdown_inline(value, line_start=False).replace("|", "\\|")

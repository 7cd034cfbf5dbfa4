"""Text from outside, made safe to show: control and bidirectional characters escaped.

An HTTP body, a request line, a server's error message or a file name reach the
operator's terminal and page. Shown raw, an ANSI escape sequence acts on the
terminal (clears it, recolours it, retitles the window), a carriage return
overwrites the line, and U+202E (RIGHT-TO-LEFT OVERRIDE) or its kin reorder what
follows, so ``c1: a -> done`` can be made to read otherwise. ``printable`` shows
each such character as its Python escape (``\\x1b``, ``\\u202e``): what was sent
stays readable, and nothing acts. It is applied where text is printed (every line
of ``courier.commands.output.out``, the error line of ``courier.cli``, the log
lines of ``courier.log_lines``, every value of the web page), not where it is
stored: the attempt log keeps what the receiver said.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 controls (a newline is kept where asked), DEL and the C1 controls; the Unicode
# bidirectional marks, embeddings, overrides and isolates; the line and paragraph
# separators a terminal or a browser may break on.
_ACTING = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_ACTING_OR_NEWLINE = re.compile(f"{_ACTING.pattern[:-1]}\n]")


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, newlines: bool = True) -> str:
    """``text`` with every control and bidirectional-formatting character shown as its
    escape; a newline is kept if ``newlines`` (a line break the caller meant)."""
    return (_ACTING if newlines else _ACTING_OR_NEWLINE).sub(_escape, text)

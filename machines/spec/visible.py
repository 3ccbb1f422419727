"""What counts as saying something: the one test of a text that must show (a definition's
``evidence:``, the evidence or reason a recorded move gives), read by the structural
checks, the systems' reliance checks and the audit alike.

A text says something when it holds a letter, a digit, a punctuation mark or a symbol
that shows. A space, a zero-width space, a mark that draws nothing on its own (a combining
mark, a variation selector) or a blank letter (a Hangul filler, a blank Braille pattern)
is not evidence (outsider batches 32 and 33 against the systems, 34 against the audit: a
forged reconcile out of ``unknown`` whose evidence was a zero-width space released a
reservation, and the audit said OK)."""

from __future__ import annotations

import unicodedata

BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")
"""Characters of a letter or symbol category that draw nothing."""


def says_something(text: object) -> bool:
    """Whether ``text`` is a text that shows something (see the module)."""
    return isinstance(text, str) and any(
        unicodedata.category(c)[0] in "LNPS" and c not in BLANK_LETTERS for c in text
    )

"""What counts as saying something: the one test of a text that must show (a definition's
``evidence:``, the evidence or reason a recorded move gives), read by the structural
checks, the systems' reliance checks and the audit alike.

A text says something when it holds a letter or a digit. Punctuation and symbols alone do
not count: several draw nothing (a blank Braille pattern, a musical null notehead, an
ideographic half fill space, a Mongolian soft hyphen), and a list of those is never
complete, while the letters that draw nothing are few and named by Unicode itself (the
Hangul fillers, the only default-ignorable letters). Outsider batches 32 to 35 forged a
reconcile out of ``unknown`` with evidence made of each such character in turn, and the
reservation was released."""

from __future__ import annotations

import unicodedata

BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
"""The letters that draw nothing: Unicode's default-ignorable code points of a letter or
digit category (the Hangul fillers)."""


def says_something(text: object) -> bool:
    """Whether ``text`` is a text that shows something (see the module)."""
    return isinstance(text, str) and any(
        unicodedata.category(c)[0] in "LN" and c not in BLANK_LETTERS for c in text
    )

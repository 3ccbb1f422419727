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

BLANK_SYMBOLS = frozenset("\u1806\u2800\u303f\U0001d159")
"""Punctuation and symbols that draw nothing in common fonts: the Mongolian soft hyphen, the
blank Braille pattern, the ideographic half fill space, the musical null notehead."""


def says_something(text: object) -> bool:
    """Whether ``text`` is a text that shows something (see the module)."""
    return isinstance(text, str) and any(
        unicodedata.category(c)[0] in "LN" and c not in BLANK_LETTERS for c in text
    )


def draws_something(text: object) -> bool:
    """Whether ``text`` is a text a reader sees: it holds a letter, a digit, a punctuation
    mark or a symbol that draws. The test of every text a definition gives (a description,
    a reason), laxer than ``says_something`` so that ``"~"`` or an emoji may describe.
    Spaces, controls, format characters (a right-to-left mark, a tag), marks alone (a
    variation selector, a combining grapheme joiner) and private-use or unassigned code
    points draw nothing by themselves (outsider batches 39 and 40, c B5 and B3)."""
    return isinstance(text, str) and any(_draws(c) for c in text)


_IGNORED_UNASSIGNED = ((0x2065, 0x2065), (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF))
"""Unassigned code points Unicode keeps default-ignorable: they will never draw."""


def _draws(c: str) -> bool:
    """A letter, digit, punctuation mark or symbol that draws; or a code point this
    Python's Unicode does not know yet (a newer one may give it a letter or an emoji: a
    definition must not be valid on one interpreter and not on another, outsider batch
    42, c 1c), unless Unicode keeps it a noncharacter or default-ignorable."""
    kind = unicodedata.category(c)
    if kind == "Cn":
        point = ord(c)
        return not (
            point & 0xFFFE == 0xFFFE
            or 0xFDD0 <= point <= 0xFDEF
            or any(low <= point <= high for low, high in _IGNORED_UNASSIGNED)
        )
    return kind[0] in "LNPS" and c not in BLANK_LETTERS | BLANK_SYMBOLS


def shown(text: str) -> str:
    """``text`` quoted for a message, each character that draws nothing (``draws_something``)
    but a plain space written as its code point, so that a refused text is seen as what it
    holds (outsider batch 42, c 1d: a Hangul filler and a blank Braille pattern were
    printed as they are, and the message quoted two blanks)."""
    return (
        "'"
        + "".join(c if c == " " or draws_something(c) else f"\\u{ord(c):04x}" for c in text)
        + "'"
    )

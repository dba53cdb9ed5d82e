"""Units of the rule language, as plain tables, and how a written number is read (no sympy:
the fast estimate path uses them)."""
from __future__ import annotations

from fractions import Fraction
from typing import Mapping

#: Units a declaration may carry, with their dimension (the power of bytes) and whether
#: a value must be a whole number.
UNITS: Mapping[str, tuple[int, bool]] = {
    "bytes": (1, False),
    "count": (0, True),
    "tokens": (0, True),
    "params": (0, True),
    "ratio": (0, False),
}

#: bytes per unit; decimal units are powers of 1000, binary units powers of 1024
BYTE_UNITS = {
    "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
}

#: the most digits a constant may have, written (1e9999) or as a power (10^9999)
MAX_DIGITS = 10_000
#: the most digits a number may be written with (Python reads at most 4,300 at once)
MAX_WRITTEN = 4_000


def read_decimal(text: str) -> Fraction:
    """The exact value of a number as the grammar's NUMBER writes it (``70e9``, ``0.1``).

    Raises ValueError, before building it, for a number of more than :data:`MAX_DIGITS`
    digits (``1e100000000`` is 17 characters but would take minutes to build).

    Examples
    --------
    >>> read_decimal("1.5e3"), read_decimal("0.1")
    (Fraction(1500, 1), Fraction(1, 10))
    """
    mantissa, _, exponent = text.lower().partition("e")
    written = len(mantissa) - ("." in mantissa)
    digits = exponent.lstrip("+-").lstrip("0")
    if written > MAX_WRITTEN or len(digits) > 6 or written + int(digits or 0) > MAX_DIGITS:
        raise ValueError(f"has more than {MAX_DIGITS:,} digits" if written <= MAX_WRITTEN
                         else f"is written with more than {MAX_WRITTEN:,} digits")
    return Fraction(text)


def unit_words(dim) -> str:
    """``bytes``, ``a plain number`` or ``bytes^k`` for a power of bytes (None: a plain number)."""
    return "a plain number" if dim is None or dim == 0 else "bytes" if dim == 1 else f"bytes^{dim}"

"""Units of the rule language, as plain tables (no sympy: the fast estimate path uses them)."""
from __future__ import annotations

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

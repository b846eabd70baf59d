"""Integer helpers for sizing tiles and grids, as the public TileLang's `tilelang.math` has them
(also exported as `tilelang.cdiv` and `tilelang.next_power_of_2`).

    tilelang.cdiv(1000, 128)                       # 8 blocks cover 1000 rows
    tilelang.math.next_power_of_2(100)             # 128
"""

from __future__ import annotations

import operator

from tilelang.errors import UserError

__all__ = ["cdiv", "next_power_of_2"]


def next_power_of_2(x: int) -> int:
    """The smallest power of two >= x, for x >= 1 (next_power_of_2(1) == 1, (5) == 8).

    As in the public TileLang, x = 0 gives 2 (the bit length of -1 is 1); kept for code that
    relies on it.

    Raises: UserError if x is not an integer."""
    try:
        x = operator.index(x)
    except TypeError:
        raise UserError(f"next_power_of_2 takes an integer, got {x!r}") from None
    return 1 << (x - 1).bit_length()


def cdiv(a, b):
    """Ceiling division, (a + b - 1) // b: the number of tiles of size b covering a (a, b > 0).
    Works on Python ints and on kernel expressions (T.dynamic sizes) alike."""
    return (a + b - 1) // b

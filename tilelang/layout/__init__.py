"""Layouts: `Fragment` (element -> thread, register) and `Layout` (element -> memory offset).

from tilelang.layout import make_swizzled_layout
T.annotate_layout({S_shared: make_swizzled_layout(S_shared)})
"""

from tilelang.layout.fragment import Fragment, partition  # noqa: F401
from tilelang.layout.layout import (  # noqa: F401
    Layout,
    make_full_bank_swizzled_layout,
    make_half_bank_swizzled_layout,
    make_linear_layout,
    make_quarter_bank_swizzled_layout,
    make_swizzled_layout,
)

"""The compiler's passes, one per file (`engine/pipeline.py` runs them in order).

`tilelang.transform.PassConfigKey` is where the public TileLang's users import the option keys from.
"""

from tilelang.options import PassConfigKey  # noqa: F401

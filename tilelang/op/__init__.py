"""Tile ops, one module each (see `base.py` for the protocol every op follows).

Importing this package imports every module in it, so each op's `@register` runs and the passes
find it through `base.parse`; `user_functions()` collects the T.* functions the modules list in
their `__all__` for `tilelang.language`.
"""

import importlib
import pkgutil


def _import_all() -> list:
    modules = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        modules.append(importlib.import_module(f"{__name__}.{info.name}"))
    return modules


_MODULES = _import_all()


def user_functions() -> dict:
    """{T.* name: function} over every op module's `__all__`; a name listed twice is an error."""
    out = {}
    for module in _MODULES:
        for name in getattr(module, "__all__", ()):
            if name in out and out[name] is not getattr(module, name):
                raise RuntimeError(f"T.{name} is defined by two op modules (one is {module.__name__})")
            out[name] = getattr(module, name)
    return out

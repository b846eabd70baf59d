"""pyproject.toml lists every package of tilelang/ (an installed, non-editable tilelang would miss a
subpackage that is not listed)."""

import os

import pytest

import tilelang

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = os.path.dirname(os.path.dirname(tilelang.__file__))


def test_every_package_is_listed():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "tilelang")):
        if "__init__.py" in files:
            found.add(os.path.relpath(folder, ROOT).replace(os.sep, "."))
    assert not found - listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"

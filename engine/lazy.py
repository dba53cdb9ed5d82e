"""Modules executed on first use: sympy, lark and the commands that need them.

``memform estimate`` with a warm cache answers without sympy (and a preset without a
``--set`` without lark), so the modules that need them are bound at the top of the modules
that use them but executed only when an attribute is first read, with the standard
library's :class:`importlib.util.LazyLoader` (the recipe of the :mod:`importlib` docs).
"""
from __future__ import annotations

import importlib.util
import sys
import types


def lazy(name: str) -> types.ModuleType:
    """The module ``name``, imported now if it already is, else on first attribute access."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ModuleNotFoundError(f"No module named '{name}'", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:  # as the import system binds a submodule on its package
        setattr(sys.modules[parent], child, module)
    return module

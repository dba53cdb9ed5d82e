"""memform: a symbolic formula engine for the GPU memory of large language models.

>>> import engine
>>> lib = engine.load()
>>> s = engine.Scenario.create(lib, "llama2-70b", "h100-80g", values={"zero_stage": 3})
>>> engine.solve(s, "min", "dp", target="model_states").value
13
"""
import sys
import types
from importlib import import_module

from .errors import EngineError

#: public name -> (module, attribute); imported on first use, so that ``memform estimate``
#: with a warm cache never imports sympy (see :mod:`engine.fast`)
_LAZY = {"Library": ("registry", "Library"), "load": ("registry", "load"),
         "Scenario": ("model", "Scenario"), "estimate": ("estimate", "estimate"),
         "show": ("estimate", "show"), "solve": ("solve", "solve"), "plan": ("plan", "plan"),
         "evaluate": ("exact", "evaluate"), "Evaluator": ("exact", "Evaluator")}

__all__ = ["EngineError", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'engine' has no attribute '{name}'")
    module, attr = _LAZY[name]
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)


class _Package(types.ModuleType):
    """Importing the submodule ``engine.solve`` must not hide the function ``engine.solve``."""

    def __setattr__(self, name, value):
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

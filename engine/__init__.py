"""memform: a symbolic formula engine for the GPU memory of large language models.

>>> import engine
>>> lib = engine.load()
>>> s = engine.Scenario.create(lib, "llama2-70b", "h100-80g", values={"zero_stage": 3})
>>> engine.solve(s, "min", "dp", target="model_states").value
13
"""
from .errors import EngineError
from .lazy import lazy

#: public name -> (module, attribute); the modules are executed on first use (engine.lazy), so
#: that ``memform estimate`` with a warm cache never imports sympy (see engine.answers.quick)
_PUBLIC = {"Library": ("library.registry", "Library"), "load": ("compile.cache", "load"),
           "Scenario": ("compile.model", "Scenario"), "estimate": ("answers.estimate", "estimate"),
           "show": ("answers.estimate", "show"), "solve": ("answers.solve", "solve"),
           "plan": ("answers.plan", "plan"), "evaluate": ("compile.exact", "evaluate"),
           "Evaluator": ("compile.exact", "Evaluator")}

__all__ = ["EngineError", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'engine' has no attribute '{name}'")
    module, attr = _PUBLIC[name]
    value = getattr(lazy(f"{__name__}.{module}"), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)

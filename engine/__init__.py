"""memform: a symbolic formula engine for the GPU memory of large language models.

>>> import engine
>>> lib = engine.load()
>>> s = engine.Scenario.create(lib, "llama2-70b", "h100-80g", values={"zero_stage": 3})
>>> engine.solve(s, "min", "dp", target="model_states").value
13
"""
from .errors import EngineError
from .registry import Library, load
from .model import Scenario
from .estimate import estimate, formula as show
from .solve import solve
from .plan import plan

__all__ = ["EngineError", "Library", "Scenario", "load", "estimate", "show", "solve", "plan"]

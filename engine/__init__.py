"""memform: a symbolic formula engine for the GPU memory of large language models."""
from .errors import EngineError
from .registry import Library, load
from .model import Scenario

__all__ = ["EngineError", "Library", "Scenario", "load"]

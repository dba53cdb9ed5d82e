"""The library: every declaration of the rule files resolved into one namespace (registry),
its snapshot, and what describes a model from outside (config.json, quantization_config,
the Hugging Face cache) and a parallel layout (divisibility)."""

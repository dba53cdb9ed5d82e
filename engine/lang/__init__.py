"""The rule language: units, declarations, the grammar and its parser, the transformer to
sympy, constant values (``--set``) and the names and aliases users type."""

"""From the resolved library to answers' arithmetic: scenarios and composition (sympy), the
compiled plain-data form (trees) and its exact and vectorised evaluators, the formula
columns written without sympy, and the cache that keeps them between processes."""

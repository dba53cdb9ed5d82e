"""What each command computes: estimate (and the path without sympy), solve, plan, serve,
the library's checks and measurements with PyTorch."""

"""Solver backends, one module each; each registers itself in zbopt.registry with
register_backend() and implements zbopt.solvers.protocol.Backend."""

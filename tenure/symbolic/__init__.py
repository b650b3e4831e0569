"""Symbolic graphs: variables, types, shared variables and ops."""

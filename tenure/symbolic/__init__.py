"""Symbolic graphs: variables, types, shared variables, ops, the FunctionGraph
and ops with inner graphs: the bottom layer, importing only config from the rest of tenure."""

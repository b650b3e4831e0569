"""Linkers turn a FunctionGraph into something that runs."""

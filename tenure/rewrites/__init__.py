"""Graph rewriting: the FunctionGraph that compiled functions work on."""

"""Specialization: replace general op combinations by faster special ops."""

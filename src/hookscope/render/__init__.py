"""Renderers: turn records into terminal tables, JSON, CSV and HTML. They never touch a model."""

"""Routers: thin mappings from HTTP to services."""

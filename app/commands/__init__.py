"""CLI command groups, each registered on the root ``runwatch`` command in app/cli.py."""

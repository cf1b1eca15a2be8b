"""The Dash dashboard: runs, run pages with coverage heatmaps, compare. Served by the API."""

"""Runs one measured function in this (fresh) process and writes its result with the peak RSS.

Usage (by bench.common.in_child): python -m bench.child module:function '{"kwarg": ...}' OUT.json
"""

from __future__ import annotations

import importlib
import json
import sys

from bench.common import peak_rss_mb


def main() -> None:
    target, kwargs, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    module, name = target.split(":")
    result = getattr(importlib.import_module(module), name)(**kwargs)
    result["peak_rss_mb"] = round(peak_rss_mb())
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()

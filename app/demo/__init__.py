"""A small, real numpy trainer that writes labelled run directories, with resume faults on demand.

``generate_run("fresh_seed", out)`` trains a tiny MLP on synthetic data, crashes and resumes it as
the scenario says, and writes ``out/fresh_seed/`` in Runwatch's run-directory format together
with a ``truth.json`` naming the faults.
"""

from app.demo.scenarios import SCENARIOS, generate_all, generate_run

__all__ = ["SCENARIOS", "generate_all", "generate_run"]

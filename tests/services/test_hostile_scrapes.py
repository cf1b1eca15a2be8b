"""Hostile telemetry answers through the scrape service on both backends: each scrape stores
what it can or records the problem on the node; none raises."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import Engine

from app.db import session_scope
from app.models import Node
from app.services.scraping import scrape_node

GPU = 'gpu="0",UUID="GPU-a",modelName="H100"'
BODIES = {
    "not json": ("prometheus", "<html>502 Bad Gateway</html>"),
    "deep json": ("prometheus", "[" * 50_000 + "]" * 50_000),
    "json of the wrong shape": ("prometheus", '{"status": "success", "data": [1, 2]}'),
    "points that are not points": (
        "prometheus",
        '{"status": "success", "data": {"resultType": "matrix", "result": [{"metric":'
        ' {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "UUID": "GPU-a"}, "values":'
        ' [{"a": 1}, [1e999, "1"], [1, 2, 3], "x"]}]}}',
    ),
    "garbage text": ("dcgm", "\x00\x01\x02 not metrics {{{\n\x0c\n" * 100),
    "nul in labels": ("dcgm", f'DCGM_FI_DEV_GPU_UTIL{{{GPU},Hostname="a\\u0000b\x00c"}} 97\n'),
    "surrogate-ish labels": ("dcgm", f'DCGM_FI_DEV_GPU_UTIL{{{GPU},pod="\udcff"}} 97\n'),
    "huge and odd values": (
        "dcgm",
        f"DCGM_FI_DEV_GPU_UTIL{{{GPU}}} 1e999\nDCGM_FI_DEV_FB_USED{{{GPU}}} -9e300 1e30\n",
    ),
}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_a_hostile_answer_never_breaks_a_scrape(case: str, engine: Engine) -> None:
    kind, body = BODIES[case]
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, content=body.encode("utf-8", "surrogatepass"))
    )
    with session_scope(engine) as session:
        node = Node(name="n", kind=kind, url="http://n:9400/metrics", labels={}, interval_s=15)
        session.add(node)
        session.flush()
        node_id = node.id
    with session_scope(engine) as session, httpx.Client(transport=transport) as client:
        stored = scrape_node(session, node_id, client=client)
    with session_scope(engine) as session:
        node = session.get(Node, node_id)
        assert node is not None
        assert stored > 0 or node.last_error, (case, stored)

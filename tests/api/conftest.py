"""The API in process (FastAPI's TestClient) on the parametrized backend, with a set of tokens."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine

from app.config import Settings
from tests.api.access import Tokens, make_api, make_tokens


@pytest.fixture
def tokens(engine: Engine) -> Tokens:
    return make_tokens(engine)


@pytest.fixture
def api(engine: Engine, settings: Settings) -> FastAPI:
    return make_api(engine, settings)

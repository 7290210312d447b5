from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .fake_server import FakeServer


@pytest.fixture
async def fake_server() -> AsyncIterator[FakeServer]:
    server = await FakeServer().start()
    yield server
    await server.stop()

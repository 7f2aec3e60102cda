"""Fixtures every end-to-end test may use: recording upstreams, always stopped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from grid.testing.gateway import Upstream


@pytest.fixture
async def upstreams() -> AsyncIterator[Callable[..., Awaitable[Upstream]]]:
    started: list[Upstream] = []

    async def make(name: str, **options: Any) -> Upstream:
        upstream = await Upstream(name, **options).start()
        started.append(upstream)
        return upstream

    yield make
    for upstream in started:
        await upstream.stop()

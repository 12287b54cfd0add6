"""A watch cache (apiserver/cacher.py) started over a backend for a test, and stopped after it:
the one pair of helpers the cacher test modules share."""

from __future__ import annotations

import asyncio
from typing import Iterable

from kubesvc.api.scheme import KindInfo
from kubesvc.apiserver.cacher import DEFAULT_CAPACITY, WatchCache
from kubesvc.util.aio import cancel_and_wait


async def start_cache(backend, kinds: Iterable[KindInfo], capacity: int = DEFAULT_CAPACITY) -> WatchCache:
    cache = WatchCache(backend, kinds, capacity=capacity)
    await cache.start()
    await asyncio.sleep(0)  # the pump's first turn: it has opened its storage watch
    return cache


async def stop_cache(cache: WatchCache) -> None:
    await cancel_and_wait([cache._task])

"""Long HTTP answers written piece by piece (``kubectl logs -f``): each chunk is sent as soon
as its source yields it, and a client that hung up is noticed even while the source is quiet,
so a followed log of an idle container does not hold its connections (and the node agent's
file) forever. The watch handler does the same for its events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterable

from aiohttp import web

log = logging.getLogger("kubesvc.serving")

DISCONNECT_POLL = 2.0  # seconds between "is the client still there?" checks while the source is quiet


def client_gone(request: web.BaseRequest) -> bool:
    return request.transport is None or request.transport.is_closing()


async def relay(request: web.BaseRequest, response: web.StreamResponse, chunks: AsyncIterable[bytes],
                poll: float = DISCONNECT_POLL) -> None:
    """Write every chunk of ``chunks`` to the prepared ``response`` until the source ends or the
    client goes away; then end the response (if the client can still hear it) and close the
    source."""
    source = aiter(chunks)
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending}, timeout=poll)
            if not done:
                if client_gone(request):
                    return
                continue
            finished, pending = pending, None
            try:
                chunk = finished.result()
            except StopAsyncIteration:
                break
            except Exception:  # the headers are out: a broken source can only end the answer early
                log.warning("stream for %s ended by its source", request.path, exc_info=True)
                break
            await response.write(chunk)
    except ConnectionError:
        return
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.wait({pending})  # let the source see its cancellation; ours still propagates
            if not pending.cancelled():
                pending.exception()  # retrieved: a source that failed just then is not reported as lost
        closer = getattr(source, "aclose", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await closer()
    with contextlib.suppress(ConnectionError, RuntimeError):
        await response.write_eof()

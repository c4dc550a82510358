"""Every endpoint's /metrics, read on an interval into the load book."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

import httpx

from app.picker.endpoints import Endpoint
from app.picker.load import LoadBook, parse_metrics

logger = logging.getLogger("specgate.picker")


class Scraper:
    def __init__(
        self,
        endpoints: Callable[[], Iterable[Endpoint]],
        book: LoadBook,
        client: httpx.AsyncClient,
        interval_s: float,
    ) -> None:
        # Asked each round: the list may change between two (app/picker/kubernetes.py).
        self.endpoints = endpoints
        self.book = book
        self.client = client
        self.interval_s = interval_s
        # Set after the first round: readiness waits for it (a picker that knows no load
        # would send a first burst all to one endpoint).
        self.first_round = asyncio.Event()

    async def run(self) -> None:
        while True:
            began = time.monotonic()
            await self.scrape_all()
            self.first_round.set()
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - began)))

    async def scrape_all(self) -> None:
        # Together: one slow endpoint delays the round by its timeout, not the others.
        await asyncio.gather(*(self.scrape(endpoint) for endpoint in list(self.endpoints())))

    async def scrape(self, endpoint: Endpoint) -> None:
        began = time.monotonic()
        url = f"http://{endpoint.address}{endpoint.metrics_path}"
        try:
            response = await self.client.get(url)
            response.raise_for_status()
            load = parse_metrics(response.text, endpoint.max_draft)
        except (httpx.HTTPError, ValueError) as exc:
            # Said once: when it goes down, or when it is down from the start.
            if self.book.ready(endpoint.address) or not self.first_round.is_set():
                logger.warning("endpoint %s is down: %s", endpoint.address, exc or type(exc))
            self.book.failed(endpoint.address)
            return
        if not self.book.ready(endpoint.address):
            logger.info("endpoint %s is up", endpoint.address)
        self.book.record(endpoint.address, load, began)

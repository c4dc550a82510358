"""The key ring in force, reloaded from the key file on SIGHUP and when the file changes.

A reload that fails (a malformed file, one that cannot be read, one that would leave no key
and so open the API) is logged with the line at fault and the ring in force is kept. Requests
in flight hold their key already, so a reload drops none of them.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from pathlib import Path

from app.tenants.keys import KeyFileError, KeyRing, key_ring

logger = logging.getLogger("specgate.keys")

WATCH_SECONDS = 2.0


class LiveKeyRing:
    def __init__(self, flag_keys: Sequence[str], path: Path | None) -> None:
        self._flag_keys = tuple(flag_keys)
        self.path = path
        self.ring: KeyRing = key_ring(self._flag_keys, path)  # a bad file stops the start
        self._seen = self._stamp()
        # Why the last reload was refused (None: it was not).
        self.last_error: str | None = None

    def reload(self) -> bool:
        """Read the file again; True when the new ring is in force."""
        self._seen = self._stamp()
        try:
            ring = key_ring(self._flag_keys, self.path)
        except KeyFileError as exc:
            return self._refused(str(exc))
        if self.ring and not ring:
            return self._refused(f"{self.path}: it holds no key, which would open the API")
        self.ring, self.last_error = ring, None
        logger.info("key file reloaded: %d keys", len(ring.keys))
        return True

    def _refused(self, why: str) -> bool:
        logger.error("key file not reloaded, the keys in force are kept: %s", why)
        self.last_error = why
        return False

    def _stamp(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            found = self.path.stat()
        except OSError:
            return None
        return (found.st_mtime_ns, found.st_size, found.st_ino)

    async def watch(self) -> None:
        """Reload on SIGHUP and when the file changes, until cancelled."""
        if self.path is None:
            return
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, self.reload)
        except (NotImplementedError, RuntimeError):  # not the main thread: polling only
            pass
        try:
            while True:
                await asyncio.sleep(WATCH_SECONDS)
                if self._stamp() != self._seen:
                    self.reload()
        finally:
            try:
                loop.remove_signal_handler(signal.SIGHUP)
            except (NotImplementedError, RuntimeError):
                pass

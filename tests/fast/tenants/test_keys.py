"""The key file: one key a line as before, or TOML tables with names, weights and limits; a
bad file names its line; reloads keep the old ring when the new file is bad."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
from pathlib import Path

import pytest

from app.tenants import live_keys
from app.tenants.keys import KeyFileError, KeyLimits, key_ring
from app.tenants.live_keys import LiveKeyRing

TABLES = """# two teams
[[key]]
name = "alpha"
key = "sk-alpha"
weight = 2
admin = true
requests_per_minute = 60
tokens_per_minute = 20000
max_in_flight = 8
tokens_per_day = 100000
tokens_per_month = 2000000

[[key]]
name = "beta"
sha256 = "{beta}"
"""


def tables(path: Path) -> Path:
    path.write_text(TABLES.format(beta=hashlib.sha256(b"sk-beta").hexdigest().upper()))
    return path


def test_tables_give_names_weights_limits_and_keys_by_digest(tmp_path: Path) -> None:
    ring = key_ring(["sk-flag"], tables(tmp_path / "keys.toml"))
    alpha = ring.find(b"sk-alpha")
    assert alpha is not None and alpha.name == "alpha" and alpha.weight == 2 and alpha.admin
    assert alpha.limits == KeyLimits(60, 20000, 8, 100000, 2000000)
    beta = ring.find(b"sk-beta")  # given only as its SHA-256, in capitals
    assert beta is not None and beta.name == "beta" and beta.weight == 1 and not beta.admin
    assert beta.limits == KeyLimits()
    flag = ring.find(b"sk-flag")  # --api-key keeps working beside the file, unnamed
    assert flag is not None and flag.name == f"key-{hashlib.sha256(b'sk-flag').hexdigest()[:8]}"
    assert ring.find(b"sk-alph") is None and ring.find(b"alpha") is None
    assert "sk-alpha" not in repr(ring) and hashlib.sha256(b"sk-alpha").hexdigest() not in repr(
        ring
    )


def test_one_key_a_line_still_works(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# team keys\nk1\n\n  k2  \n")
    ring = key_ring([], path)
    assert len(ring.keys) == 2 and ring.find(b"k1") and ring.find(b"k2")


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        ('[[key]]\nname = "a"\nkey = "k"\nweight = 0\n', 4, "weight"),
        ('[[key]]\nname = "a"\nkey = "k"\n\n[[key]]\nkey = "j"\nrpm = 5\n', 7, "rpm"),
        ('[[key]]\nname = "a"\nkey = "k"\nrequests_per_minute = "ten"\n', 4, "requests_per_minute"),
        ('[[key]]\nname = "a"\n', 1, "exactly one of key or sha256"),
        ('[[key]]\nname = "a"\nsha256 = "abc"\n', 1, "64 hex digits"),
        ('[[key]]\nname = "a b"\nkey = "k"\n', 2, "name"),
        ('[[key]]\nname = "a"\nkey = "k\n', 3, "line 3"),
        ('[keys]\nname = "a"\n', 1, r"only \[\[key\]\] tables"),
    ],
)
def test_a_bad_file_names_the_line_at_fault(
    tmp_path: Path, text: str, line: int, says: str
) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(KeyFileError, match=says) as caught:
        key_ring([], path)
    assert caught.value.line == line and f"line {line}" in str(caught.value)


def test_names_and_keys_appear_once(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text('[[key]]\nname = "a"\nkey = "k"\n[[key]]\nname = "a"\nkey = "j"\n')
    with pytest.raises(KeyFileError, match="name a is used twice"):
        key_ring([], path)
    path.write_text('[[key]]\nname = "a"\nkey = "k"\n')
    with pytest.raises(KeyFileError, match="given twice"):
        key_ring(["k"], path)


async def test_the_file_reloads_on_change_and_on_sighup_and_keeps_the_old_ring_when_bad(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_keys, "WATCH_SECONDS", 0.02)
    path = tables(tmp_path / "keys.toml")
    live = LiveKeyRing([], path)
    watching = asyncio.create_task(live.watch())
    try:
        await asyncio.sleep(0.05)
        path.write_text('[[key]]\nname = "gamma"\nkey = "sk-gamma"\n')
        await until(lambda: live.ring.find(b"sk-gamma") is not None)
        assert live.ring.find(b"sk-alpha") is None
        path.write_text('[[key]]\nname = "gamma"\nkey = "sk-gamma"\nweight = -1\n')  # bad
        await asyncio.sleep(0.1)
        assert live.ring.find(b"sk-gamma") is not None  # the ring in force is kept
        path.write_text("# nobody\n")  # no key at all would open the API: refused too
        await asyncio.sleep(0.1)
        assert live.ring.find(b"sk-gamma") is not None
        # SIGHUP rereads at once, whatever the file's time stamp says.
        monkeypatch.setattr(live_keys, "WATCH_SECONDS", 3600)
        await asyncio.sleep(0.05)
        path.write_text('[[key]]\nname = "delta"\nkey = "sk-delta"\n')
        os.kill(os.getpid(), signal.SIGHUP)
        await until(lambda: live.ring.find(b"sk-delta") is not None)
    finally:
        watching.cancel()


async def until(condition: object, seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)

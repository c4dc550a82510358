"""Put a `redis-server` in this environment's bin/ for the tests of limits shared across
gateway processes (tests/fast/tenants/test_shared_limits.py start a real one).

`python -m scripts.install_redis_server` (`make install` runs it): nothing to do where the
system has `redis-server` on PATH (Debian's `redis-server` package) or the environment has it
already; otherwise Debian's packages are downloaded with `apt-get download` (no root needed;
redis-tools, whose binary is the server, and the two libraries it links that a base system
lacks: about 1.2 MB, a few seconds) and unpacked under `<venv>/redis/`, with `<venv>/bin/
redis-server` a script that runs it with its libraries. specgate itself never needs it: a
deployment points `--limits-redis` at its own Redis.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("redis-tools", "libjemalloc2", "liblzf1")
WRAPPER = """#!/bin/sh
# Debian's redis-server, unpacked by scripts/install_redis_server.py, with its libraries.
home="$(dirname "$(readlink -f "$0")")/../redis"
LD_LIBRARY_PATH="$home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$home/bin/redis-server" "$@"
"""


def environment_server() -> Path:
    return Path(sys.prefix) / "bin" / "redis-server"


def unpack(into: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        subprocess.run(
            ["apt-get", "download", *PACKAGES], cwd=work, check=True, capture_output=True
        )
        root = work / "root"
        for package in work.glob("*.deb"):
            subprocess.run(["dpkg-deb", "-x", package, root], check=True)
        (into / "bin").mkdir(parents=True, exist_ok=True)
        (into / "lib").mkdir(parents=True, exist_ok=True)
        binary = root / "usr" / "bin" / "redis-check-rdb"
        shutil.copy2(binary, into / "bin" / "redis-check-rdb")
        # The binary is the server when the name it is run by is not redis-check-rdb's.
        link = into / "bin" / "redis-server"
        link.unlink(missing_ok=True)
        link.symlink_to("redis-check-rdb")
        for library in root.rglob("*.so.*"):
            if library.is_file() and library.parent.name != "debug":
                shutil.copy2(library, into / "lib" / library.name)
            elif library.is_symlink():
                target = into / "lib" / library.name
                target.unlink(missing_ok=True)
                target.symlink_to(library.readlink().name)


def main() -> int:
    found = shutil.which("redis-server")
    server = environment_server()
    if found:
        print(f"redis-server: {found}")
        return 0
    if server.exists():
        print(f"redis-server: {server}")
        return 0
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        print("warning: no redis-server and no apt-get; the shared-limits tests will be skipped")
        return 0
    try:
        unpack(Path(sys.prefix) / "redis")
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"warning: redis-server could not be unpacked ({exc}); shared-limit tests skip")
        return 0
    server.write_text(WRAPPER)
    server.chmod(server.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    version = subprocess.run([server, "--version"], capture_output=True, text=True, check=False)
    print(f"redis-server: {server} ({version.stdout.strip() or version.stderr.strip()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

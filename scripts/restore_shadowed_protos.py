"""Put back the files xds-protos overwrote in other distributions (`make install` runs it).

xds-protos (the picker's Envoy protos) ships its own copies of protos that other packages
own: googleapis-common-protos' `google/api`, opencensus' `__init__`, and an older
opentelemetry-proto, whose `common_pb2` lacks what the OTLP exporter vLLM imports asks for.
Whichever pip installs last wins, so after an install this finds every file both ship whose
content no longer matches its owner's record, and reinstalls those owners as they are
(same version, no dependencies). The picker's protos import none of the files put back.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from importlib import metadata
from pathlib import Path

SHADOWING = "xds-protos"


def overwritten() -> list[str]:
    """`name==version` of every distribution a file of which xds-protos replaced."""
    try:
        shadowing = metadata.distribution(SHADOWING)
    except metadata.PackageNotFoundError:
        return []
    shipped = {str(path) for path in shadowing.files or ()}
    owners = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name is None or name.lower() == SHADOWING:
            continue
        for path in dist.files or ():
            recorded = path.hash
            if str(path) in shipped and recorded is not None and not _matches(path, recorded):
                owners.add(f"{name}=={dist.version}")
                break
    return sorted(owners)


def _matches(path: metadata.PackagePath, recorded: metadata.FileHash) -> bool:
    """The file on disk is the one its distribution's RECORD lists."""
    try:
        data = Path(path.locate()).read_bytes()
    except OSError:
        return False  # gone: the owner needs it back too
    digest = hashlib.new(recorded.mode, data).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == recorded.value


def main() -> None:
    owners = overwritten()
    if owners:
        reinstall = ["pip", "install", "--quiet", "--no-deps", "--force-reinstall"]
        subprocess.run([sys.executable, "-m", *reinstall, *owners], check=True)
        print("restored:", " ".join(owners))


if __name__ == "__main__":
    main()

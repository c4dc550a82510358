#!/bin/sh
# Entrypoint of both images: every argument goes to specgate unchanged, so
# `docker run IMAGE --model ...` takes the same flags as `python -m app`.
# exec replaces this shell: specgate itself receives docker stop's SIGTERM, drains open
# streams and stops its engine processes, instead of being killed after the grace period.
set -eu
exec python3 -m app "$@"

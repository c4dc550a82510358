"""What vLLM loads in the worker process: an engine names `DraftWorkerExtension` as its
`worker_extension_cls` (app/engine/draft_worker.py: WORKER_EXTENSION_QUALNAME).

vLLM offers no call into an extension at start-up, only the import of its module, so this
module's import installs the worker patches, and nothing else imports it.
"""

from __future__ import annotations

from app.engine.draft_worker import install

install()


class DraftWorkerExtension:
    """Nothing to call: loading it is what installs the patches in the worker."""

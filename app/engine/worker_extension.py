"""What vLLM loads in the worker process: every embedded engine on a CPU, and every
speculative engine, names `WorkerExtension` as its `worker_extension_cls`
(app/engine/vllm_engine.py: WORKER_EXTENSION_QUALNAME).

vLLM offers no call into an extension at start-up, only the import of its module, so this
module's import installs the worker's changes, and nothing else imports it:
- app/engine/draft_worker.py: per-request draft lengths (each change passes through on an
  engine that does not draft);
- app/engine/cpu_kernels.py: one-pass RMSNorm kernels on CPUs.
"""

from __future__ import annotations

from app.engine import cpu_kernels, draft_worker

draft_worker.install()
cpu_kernels.install()


class WorkerExtension:
    """Nothing to call: loading it is what installs the changes in the worker."""

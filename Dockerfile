# The GPU image: specgate on vLLM's own CUDA image, which already holds vllm 0.32.0, its CUDA
# stack and Ray (for multi-node). Build from the repository root: docker build -t specgate:gpu .
# Run: docker run --gpus all --ipc host -p 8000:8000 specgate:gpu --model ... (README, "Deployment")
FROM vllm/vllm-openai:v0.32.0

COPY pyproject.toml README.md /opt/specgate/src/
COPY app /opt/specgate/src/app
# The gpu extra asks for vllm==0.32.0, which the base image satisfies, so pip keeps its build;
# the ray extra adds Ray Serve for --ray-replicas (engine replicas on GPUs: docs/deployment.md).
RUN python3 -m pip install --no-cache-dir "/opt/specgate/src[gpu,ray]"
# The suffix-tree drafter (vLLM's "suffix" method), built from source against the image's torch.
COPY scripts/install_arctic_inference.py /opt/specgate/src/scripts/
RUN python3 /opt/specgate/src/scripts/install_arctic_inference.py

# A fixed high uid, so that no user of the base image is reused. The Hugging Face cache is a
# volume: weights of tens of GB are downloaded once, not into every container's layer. So are
# the compile caches (vLLM's torch.compile artifacts, Inductor's and Triton's kernels):
# without them every restart recompiles both engines for minutes. And the usage ledger, which
# must outlive the container.
RUN useradd --create-home --no-log-init --uid 10001 specgate \
    && mkdir -p /data/huggingface /data/compile-cache /data/usage \
    && chown specgate /data/huggingface /data/compile-cache /data/usage
COPY --chmod=755 docker/entrypoint.sh /usr/local/bin/specgate-entrypoint

# Every setting is also a SPECGATE_* variable. Set the port with SPECGATE_PORT, not --port:
# the health check reads it there.
ENV SPECGATE_HOST=0.0.0.0 \
    SPECGATE_PORT=8000 \
    SPECGATE_USAGE_LEDGER_PATH=/data/usage/usage.sqlite3 \
    HF_HOME=/data/huggingface \
    VLLM_CACHE_ROOT=/data/compile-cache/vllm \
    TORCHINDUCTOR_CACHE_DIR=/data/compile-cache/inductor \
    TRITON_CACHE_DIR=/data/compile-cache/triton
VOLUME ["/data/huggingface", "/data/compile-cache", "/data/usage"]
USER 10001
WORKDIR /home/specgate
EXPOSE 8000

# Large models take many minutes to download and load; /health answers 503 until both engines run.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30m --retries=3 \
    CMD ["python3", "-m", "app.healthcheck"]
ENTRYPOINT ["/usr/local/bin/specgate-entrypoint"]
CMD []

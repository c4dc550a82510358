"""specgate as the endpoint picker of Kubernetes' inference gateway (the Gateway API Inference
Extension): an Envoy ext_proc server that chooses, for each request, which model server serves
it and whether it drafts, by the rule specgate's Ray Serve router uses.

    __main__.py  flags in, serve until SIGTERM
    settings.py  PickerSettings (SPECGATE_PICKER_*), the protocol's names
    endpoints.py the model servers, from a file (kubernetes.py: an InferencePool's pods)
    scraper.py   their /metrics on an interval      -> load.py   the load book
    request.py   the OpenAI body and X-Speculative  -> RequestFacts
    choose.py    both in the rule's terms (app/placement/replica_rank.py), pure
    picker.py    one decision per request, with the prefix and history records
    exchange.py  one ext_proc stream: Envoy's messages in, answers out
    server.py    grpc.aio: ExternalProcessor and the health service

It needs the `picker` extra (grpcio, xds-protos, grpcio-health-checking). Nothing here
imports vLLM.
"""

"""The specgate benchmark: never / always / auto routing against vLLM's own server."""

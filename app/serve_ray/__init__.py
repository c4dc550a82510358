"""specgate on Ray Serve: engine replicas, specgate's request router, the gateway as ingress
(the optional extra `ray`; nothing else imports this package)."""

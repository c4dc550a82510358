"""Who a request's client is (its key's name, weight and limits), what it may still use, its
share of the engine, and the usage kept per key."""

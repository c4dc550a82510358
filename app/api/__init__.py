"""One thin router per endpoint family; they read shared state through app.api.deps."""

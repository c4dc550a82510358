"""The encoders: one module per endpoint family, from a `Run` to OpenAI's bodies and chunks."""

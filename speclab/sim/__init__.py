"""The embedded vLLM-compatible engine. Its own process; imports only speclab.model."""

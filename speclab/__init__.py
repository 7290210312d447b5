"""speclab: a terminal load-and-latency lab for speculative decoding on vLLM."""

__version__ = "0.1.0"

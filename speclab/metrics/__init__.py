"""Metrics: HDR latency histograms, interval aggregation into Snapshots, /metrics scraping."""

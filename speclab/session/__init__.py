"""The composition root: lab + scenario + servers + traffic + metrics + recorder."""

"""Launching and managing the servers speclab measures: argv, lifecycle, pairing, memory."""

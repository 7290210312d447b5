"""The bottom layer: file models, records, snapshots, events, error and exit-code enums.

Imports nothing from the rest of speclab; everything else imports from here.
"""

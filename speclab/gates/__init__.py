"""Release-gate evaluation: pure functions over records and files, one ``StageResult`` per stage.

The accept orchestration (``speclab.session``) runs traffic against live servers and hands the
records here; nothing in this package opens a socket or starts a process.
"""

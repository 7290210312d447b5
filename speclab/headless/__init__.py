"""The screenless front end: progress lines, reports, exit codes."""

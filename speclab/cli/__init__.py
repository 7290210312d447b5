"""The command line: builds a session and hands it to a front end."""

"""The test suite's own OAuth authorization server (authorization_server.py)."""

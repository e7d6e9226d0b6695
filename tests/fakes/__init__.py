"""Fakes for tests: stand-ins for services the real clients talk to (see providers.py)."""

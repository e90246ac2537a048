"""Dataflow tests run against every storage backend through the shared `store` fixture."""

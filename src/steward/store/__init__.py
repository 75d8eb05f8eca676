"""The durable store: runs and their append-only event log, on SQLite or PostgreSQL.

``open_store(url)`` (in ``steward.store.events``) opens the database, applies migrations and
returns an ``EventStore``. ``schema`` holds the tables and the ordered migrations; ``engine``
turns a store URL into a configured async SQLAlchemy engine.
"""

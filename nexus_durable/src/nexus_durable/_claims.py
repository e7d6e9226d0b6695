"""A record, outside DBOS's step checkpoints, that a recovered call's handler has started.

DBOS runs a step at least once: a host killed after the step's work but before its checkpoint
runs it again on recovery. The handler of a recovered call claims its idempotency key here
before it runs; a claim that exists already means an earlier run of the same step was cut
short, maybe after the tool did its work, so the call is reported as possibly done instead of
being run a second time. One small table beside DBOS's, in the same database.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

TABLE = "nexus_durable_claims"


def engine_url(url: str) -> sa.URL:
    """`url` for SQLAlchemy: a plain postgresql:// URL uses psycopg 3 (what DBOS brings)."""
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


class Claims:
    def __init__(self, url: str) -> None:
        self._engine = sa.create_engine(engine_url(url), pool_pre_ping=True)
        metadata = sa.MetaData()
        self._table = sa.Table(
            TABLE, metadata,
            sa.Column("key", sa.String(400), primary_key=True),
            sa.Column("claimed_at", sa.Float, nullable=False),
            sa.Column("executor", sa.String(400), nullable=False),
        )
        metadata.create_all(self._engine, checkfirst=True)

    def claim(self, key: str, executor: str) -> bool:
        """True for the first claim of `key`, False when it was claimed before."""
        try:
            with self._engine.begin() as conn:
                conn.execute(self._table.insert().values(key=key, claimed_at=time.time(), executor=executor))
        except sa.exc.IntegrityError:
            return False
        return True

    def close(self) -> None:
        self._engine.dispose()

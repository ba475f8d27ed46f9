"""Moving a journal or an app store forward to the schema this code writes: one numbered list of steps
per kind of file, the file's place in it kept in ``PRAGMA user_version``.

Why numbered: a file says which steps it has had, so opening it runs only the ones it lacks, once, in
order, in one transaction (a crash midway leaves it as it was), and a file written by a newer
version (a number past the list) is refused before anything of it is touched, rather than read wrong
or changed into something that version cannot read.

Files written before the numbers (``user_version`` 0) may be at any point of the history the first
steps replay: each of those steps looks for what it changes before changing it, so an old file is
brought forward and a current one is left as it is.  A new file runs the same steps, from 0: there
is one way a schema comes to be.  A step added later is appended and may take the file as the steps
before it left it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pilothouse.store.db import sqlite_utils, transaction

Step = Callable[[sqlite_utils.Database], None]


class SchemaTooNew(RuntimeError):
    """A file whose schema is of a newer version of pilothouse than this one: left untouched."""


def version(db: sqlite_utils.Database) -> int:
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite_utils.Database, steps: Sequence[Step], what: str) -> int:
    """Run the steps ``db`` has not had, in one write transaction, and number it; returns the
    version it was at.  SchemaTooNew, changing nothing, if it is past ``steps``.  Several
    connections may open the file at once: the version is read again under the write lock."""
    was = version(db)
    _check(was, steps, what)
    if was == len(steps):
        return was
    with transaction(db):
        was = version(db)
        _check(was, steps, what)
        for step in steps[was:]:
            step(db)
        db.execute(f"PRAGMA user_version={len(steps)}")
    return was


def _check(was: int, steps: Sequence[Step], what: str) -> None:
    if was > len(steps):
        raise SchemaTooNew(f"{what} is of schema version {was}, written by a newer pilothouse than this one "
                           f"(which knows versions up to {len(steps)}): upgrade pilothouse to open it; "
                           "it was not changed")

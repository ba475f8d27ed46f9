"""What crosses the wire, both directions: message types, journal entries, trainer records, names,
tuning and alert-rule schemas.  Plain data and checks (msgpack and numpy only): every process
imports it, so it imports no sockets, no SQLite and nothing of the other folders."""

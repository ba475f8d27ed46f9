"""The storage layer of the node's journal and the app's store: both keep the same entry rows in
SQLite, so both go through the same code to open a file (``db``), to move its schema forward
(``migrations``: numbered steps under ``PRAGMA user_version``), to fold and store min/max tiers
(``tiers``: the fold, plain numpy; ``tier_table``: its blocks in SQLite), to search rollouts
(``rollout_search``), to pack small metric entries into large ones (``packing``) and to delete a
removed run's rows in bounded batches (``removal``).  What differs between the two is passed in
as table and key column names, never copied.

Nothing is imported here: the fold is loaded by the client and the CLI, which must not load SQLite.
"""

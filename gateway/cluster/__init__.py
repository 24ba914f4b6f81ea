"""What runs only in a cluster (``cluster.databaseUrl`` set): several replicas of the gateway
on one PostgreSQL database. psycopg is imported here and in the state backend only, and
these modules only when a configuration names a database, so a single process on SQLite
never loads them. One module per concept: :mod:`.leader` (which replica holds a channel's
one inbound connection), :mod:`.notify` (the web chat's LISTEN/NOTIFY relay).
"""

__all__: list[str] = []

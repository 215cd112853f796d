"""Redis as the run's store: the key schema, versioned weights, the connection, a bundled
server for local runs, and a finished run's Redis opened from its run dir."""

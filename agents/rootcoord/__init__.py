"""The root coordinator: applies DDL events from ``dd`` to the meta table, in order, exactly once."""

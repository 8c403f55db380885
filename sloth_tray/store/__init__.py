"""The queue's file: the only writer (Queue), its schema, the status reads, the spool."""

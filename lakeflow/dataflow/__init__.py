"""The dataflow service: ingest commits, run data policies, issue tasks, serve batches."""

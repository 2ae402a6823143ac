"""Stage 3, export: the estimator's per-layer attention scores as Parquet, queryable with DuckDB."""

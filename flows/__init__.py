"""Orchestration: Prefect flows and the MLflow tracking layer around the plain stages of sgt_core."""

#!/bin/sh
# Creates Prefect's database beside MLflow's (POSTGRES_DB); the postgres image runs this once, on an empty volume.
set -eu
psql --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" --set ON_ERROR_STOP=1 \
    --command "CREATE DATABASE \"$PREFECT_DB\" OWNER \"$POSTGRES_USER\";"

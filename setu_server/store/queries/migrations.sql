-- name: migration_lock
-- Serialises migrating servers until the transaction ends (a transaction-mode
-- pooler keeps no session between transactions). $1 lock key
SELECT pg_advisory_xact_lock($1);

-- name: create_migration_table
-- no parameters
CREATE TABLE IF NOT EXISTS schema_migration (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: applied_migrations
-- no parameters
SELECT version FROM schema_migration ORDER BY version;

-- name: record_migration
-- $1 version, $2 name
INSERT INTO schema_migration (version, name) VALUES ($1, $2);

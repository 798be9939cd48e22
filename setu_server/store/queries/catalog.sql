-- The streams a connection offers, as its last discover saw them.

-- name: upsert_catalog_stream
-- One discovered stream: new → active; seen with another shape → changed;
-- seen as before → active. $1 connection_id, $2 namespace, $3 name,
-- $4 columns jsonb, $5 primary_key text[], $6 row_estimate, $7 now
INSERT INTO catalog_stream AS c
    (connection_id, namespace, name, columns, primary_key, row_estimate, status, discovered_at)
VALUES ($1, $2, $3, $4, $5, $6, 'active', coalesce($7, now()))
ON CONFLICT (connection_id, namespace, name) DO UPDATE
SET status = CASE WHEN c.columns = EXCLUDED.columns AND c.primary_key = EXCLUDED.primary_key
                  THEN 'active' ELSE 'changed' END,
    columns = EXCLUDED.columns,
    primary_key = EXCLUDED.primary_key,
    row_estimate = EXCLUDED.row_estimate,
    discovered_at = EXCLUDED.discovered_at
RETURNING *;

-- name: mark_missing_catalog_streams
-- Streams the last discover did not see. $1 connection_id, $2 seen ("namespace.name") text[]
UPDATE catalog_stream SET status = 'missing'
WHERE connection_id = $1 AND NOT (namespace || '.' || name = ANY($2::text[]))
RETURNING *;

-- name: list_catalog_streams
-- $1 connection_id
SELECT * FROM catalog_stream WHERE connection_id = $1 ORDER BY namespace, name;

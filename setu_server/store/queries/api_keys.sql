-- name: insert_api_key
-- $1 id, $2 workspace_id, $3 name, $4 prefix, $5 token_hash, $6 now
INSERT INTO api_key (id, workspace_id, name, prefix, token_hash, created_at)
VALUES ($1, $2, $3, $4, $5, coalesce($6, now()))
RETURNING id, workspace_id, name, prefix, created_at, revoked_at;

-- name: list_api_keys
-- $1 workspace_id
SELECT id, workspace_id, name, prefix, created_at, revoked_at
FROM api_key WHERE workspace_id = $1 ORDER BY created_at, id;

-- name: revoke_api_key
-- Idempotent: keeps the first revocation time. $1 id, $2 now
UPDATE api_key SET revoked_at = coalesce(revoked_at, $2, now())
WHERE id = $1
RETURNING id, workspace_id, name, prefix, created_at, revoked_at;

-- name: authenticate_api_key
-- The workspace of a live key, touching last_used_at at most once a minute
-- so that authentication does not write on every call. $1 token_hash, $2 now
WITH found AS (
    SELECT id, workspace_id, last_used_at FROM api_key
    WHERE token_hash = $1 AND revoked_at IS NULL
), touched AS (
    UPDATE api_key SET last_used_at = coalesce($2, now())
    FROM found
    WHERE api_key.id = found.id
      AND (found.last_used_at IS NULL
           OR found.last_used_at < coalesce($2, now()) - interval '1 minute')
)
SELECT id, workspace_id FROM found;

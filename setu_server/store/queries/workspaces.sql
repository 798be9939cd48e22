-- name: insert_workspace
-- $1 id, $2 name, $3 now (null: database time)
INSERT INTO workspace (id, name, created_at)
VALUES ($1, $2, coalesce($3, now()))
RETURNING id, name, created_at;

-- name: get_workspace
-- $1 id
SELECT id, name, created_at FROM workspace WHERE id = $1;

-- name: get_workspace_by_name
-- $1 name
SELECT id, name, created_at FROM workspace WHERE name = $1;

-- name: list_workspaces
-- no parameters
SELECT id, name, created_at FROM workspace ORDER BY name;

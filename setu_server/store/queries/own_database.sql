-- name: own_database_settings
-- Where Setu's own PostgreSQL listens, as far as this role may see: its
-- port, and its Unix socket folders (shown only to superusers and members
-- of pg_read_all_settings). Read at startup, for the cloud workers'
-- refusal of the server's own database (setu_server/worker/endpoints.py).
-- No parameters.
SELECT name, setting FROM pg_settings
WHERE name IN ('port', 'unix_socket_directories');

-- name: backend_pid
-- The PostgreSQL session (backend process) this statement ran in: a
-- transaction-mode pooler shows one backend to two connections, or moves one
-- connection between backends. no parameters
SELECT pg_backend_pid();

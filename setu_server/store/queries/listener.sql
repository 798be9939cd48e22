-- name: ping
-- Keeps the LISTEN connection honest. no parameters
SELECT 1;

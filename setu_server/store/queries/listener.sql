-- name: ping
-- Keeps the LISTEN connection honest, and names the backend that answered: a
-- true session answers from the same one every time. no parameters
SELECT pg_backend_pid();

-- name: listen_probe
-- A notification to the listener's own probe channel, sent through the pool:
-- the LISTEN session is only as good as what it receives. $1 channel, $2 payload
SELECT pg_notify($1, $2);

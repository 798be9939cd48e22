-- name: changed_jobs
-- The watch hub's re-check (docs/architecture.md, "The watch hub"): of the
-- watched jobs $1, the rows whose version is newer than the one the hub
-- holds for it ($2, in the same order; 0 where it holds no snapshot yet, so
-- that job's whole row comes back). Jobs nobody changed behind the hub's
-- back cost an index probe each and send nothing.
-- $1 ids uuid[], $2 versions held bigint[]
SELECT job.*
FROM unnest($1::uuid[], $2::bigint[]) AS held (id, version)
JOIN job ON job.id = held.id
WHERE job.version > held.version;

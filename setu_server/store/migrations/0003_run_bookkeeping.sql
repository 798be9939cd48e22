-- 0003_run_bookkeeping: what a resumed load needs to know.
--
-- A stream's load commits in the destination, then is recorded here; a
-- retry that resumes at load skips streams already loaded, so an append
-- does not land twice.
ALTER TABLE job_output ADD COLUMN loaded_at timestamptz;

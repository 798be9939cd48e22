-- 0005_agent_sign_off: an agent that stops gracefully says so (SignOff) and
-- is offline at once, until it checks in again.
ALTER TABLE agent ADD COLUMN signed_off_at timestamptz;

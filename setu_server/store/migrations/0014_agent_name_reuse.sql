-- 0014_agent_name_reuse: an agent's name is unique among the workspace's
-- active agents only, so a host that replaces one whose agent was
-- deactivated registers again under the same name. Where two agents share
-- a name, people read it with the short id (service/naming.py).
ALTER TABLE agent DROP CONSTRAINT agent_workspace_id_name_key;
CREATE UNIQUE INDEX agent_active_name_key ON agent (workspace_id, name) WHERE active;

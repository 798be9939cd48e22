"""The server's side of the cloud runtime: it starts and keeps its own cloud
worker processes (supervisor.py) and names its database's endpoints to them
(endpoints.py). The workers themselves live in setu_agent/cloud/."""

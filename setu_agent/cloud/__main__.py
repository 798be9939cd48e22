"""`python -m setu_agent.cloud`: the cloud worker (setu-worker)."""

from setu_agent.cloud.main import main

main()

"""setu's client commands (connections, pipelines, runs, jobs), over the SDK.

The package uses only `setu_client`; the `setu` command of an installed
server adds `dev` and `admin` to these (setu_server/cli.py). Run it alone
with `python -m setu_cli`.
"""

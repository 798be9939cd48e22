from setu_cli.main import client_main

client_main()

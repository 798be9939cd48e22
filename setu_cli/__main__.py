from setu_cli.main import main

main()

from repro.cli.app import main

main()

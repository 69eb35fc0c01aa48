from repro.cli.root import main

main()

from tidemq.cli import main

main()

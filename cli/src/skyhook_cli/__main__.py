from skyhook_cli.main import main

main()

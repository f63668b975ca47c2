from skyhook_dev.cli import main

main()

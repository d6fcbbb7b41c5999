from lockguard.cli import main

main()

from vlprobe.cli import main

main()

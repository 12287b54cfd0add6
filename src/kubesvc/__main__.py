from kubesvc.cli import main

main()

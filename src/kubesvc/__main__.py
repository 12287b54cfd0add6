from kubesvc.cmd import main

main()

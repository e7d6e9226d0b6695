from ..launchers.machine import serve_main

serve_main()

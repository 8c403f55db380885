from sloth_tray.cli import main

raise SystemExit(main())

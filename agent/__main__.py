from pilothouse.cli import main

raise SystemExit(main())

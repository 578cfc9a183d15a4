from msda_labs.cli import main

raise SystemExit(main())

from evalgpu.cli import main

raise SystemExit(main())

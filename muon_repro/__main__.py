from muon_repro.cli import main

raise SystemExit(main())

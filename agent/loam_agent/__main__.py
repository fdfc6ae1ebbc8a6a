from loam_agent.cli import main

raise SystemExit(main())

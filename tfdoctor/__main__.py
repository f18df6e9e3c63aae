from tfdoctor.cli import main

raise SystemExit(main())

import sys

from zyquo_tui.cli.main import main

sys.exit(main())

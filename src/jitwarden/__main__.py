import sys

from jitwarden.cli.main import main

sys.exit(main())

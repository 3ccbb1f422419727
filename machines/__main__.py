import sys

from machines.cli import main

sys.exit(main())

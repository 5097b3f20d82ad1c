"""python -m surgery ...: see surgery.cli."""

import sys

from surgery.cli import main

sys.exit(main())

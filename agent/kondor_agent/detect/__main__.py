"""`python -m kondor_agent.detect`: the `detect` subcommand on its own."""

import sys

from kondor_agent.detect._cli import main

sys.exit(main())

"""`python -m kondor_devcluster dev-cluster up|down`."""

from __future__ import annotations

import sys

from kondor_devcluster.cli import main

sys.exit(main())

"""Make the benchmarks' support modules (`bench/fleet_sim.py`) and the agent tests' fakes
(`agent_fakes`) importable.

pytest runs with --import-mode=importlib, which does not put test folders on sys.path, and
`bench/` is a folder of scripts, not a package.
"""

from __future__ import annotations

import sys
from pathlib import Path

_UNIT = Path(__file__).resolve().parents[1]
for _path in (str(_UNIT.parents[1] / "bench"), str(_UNIT / "agent")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

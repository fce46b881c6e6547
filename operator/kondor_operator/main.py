"""`kondor-operator`: the kopf operator. Its reconcilers are not built yet."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    print(
        "kondor-operator: the operator (SlotPolicy and ExecutionPoint reconcilers) is not "
        "built yet; use `kondor simulate` or `kondor policy compile` to try policies offline",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())

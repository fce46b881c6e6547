"""The one base of every error a user's input can cause in Kondor.

A bad expression, a slot layout the machine cannot have, an invalid manifest: each is a
`KondorError` naming the field, the value and what is allowed, so an edge (the CLI, a
webhook, the agent) catches one type and shows the message as it is. It is a ValueError,
as bad input is.
"""


class KondorError(ValueError):
    """Input Kondor refuses, with a message that names the field, the value and what is
    allowed."""

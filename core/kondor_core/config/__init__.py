"""HTCondor configuration for Kondor: a SlotPolicy compiles to one EffectivePolicy.

`compile_policy` reads the structured fields and the `condorConfig` snippet
(HTCondor's configuration language, its templates included), `render_policy`
shows the result as plain data, and `policy_hash` fingerprints it.
"""

from kondor_core.config.compile import PolicyError, compile_policy
from kondor_core.config.effective import EffectivePolicy, SlotTypeDef
from kondor_core.config.render import policy_hash, render_policy, shares_text
from kondor_core.config.snippet import (
    MacroTable,
    Snippet,
    SnippetError,
    builtin_value,
    parse_snippet,
)

__all__ = [
    "EffectivePolicy",
    "MacroTable",
    "PolicyError",
    "SlotTypeDef",
    "Snippet",
    "SnippetError",
    "builtin_value",
    "compile_policy",
    "parse_snippet",
    "policy_hash",
    "render_policy",
    "shares_text",
]

"""The `kondor` and `kubectl-kondor` commands."""

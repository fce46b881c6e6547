"""The Kondor node agent (DaemonSet): detection, carving, policy, launchers, reporting."""

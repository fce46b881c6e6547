"""Running process and Apptainer jobs on the node, as HTCondor's condor_starter does.

- `kondor_agent.execute.limits`: what a job's cgroup is limited to (policy);
- `kondor_agent.execute.cgroups`: `JobCgroups`, cgroup v1/v2/hybrid behind one interface;
- `kondor_agent.execute.launcher`: `ProcessLauncher` (launch, poll, kill, suspend, adopt, remove);
- `kondor_agent.execute.supervisor`: the detached per-job supervisor;
- `kondor_agent.execute.records`: the job directory's files, shared by the two sides.

Nothing is re-exported here on purpose: the supervisor is started as
`python -m kondor_agent.execute.supervisor`, which imports this package, and
importing the launcher (pydantic, the core) would add half a second to every
job's start.
"""

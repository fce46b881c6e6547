"""The primitives the process and Apptainer runtimes (`kondor_agent.runtimes`) run jobs with,
as HTCondor's condor_starter does.

- `kondor_agent.execute.limits`: what a job's cgroup is limited to (policy);
- `kondor_agent.execute.cgroups`: `JobCgroups`, cgroup v1/v2/hybrid behind one interface;
- `kondor_agent.execute.bpf_devices`: cgroup v2 device programs (eBPF, through bpf(2));
- `kondor_agent.execute.supervisor`: the detached per-job supervisor;
- `kondor_agent.execute.records`: the job directory's files, shared by the two sides;
- `kondor_agent.execute.jobdir`, `hookrun`, `privileges`: the job directory's layout, the
  job's hooks as the supervisor runs them, and the directories a job may cross.

Nothing is re-exported here on purpose: the supervisor is started as
`python -m kondor_agent.execute.supervisor`, which imports this package, and
importing the launcher (pydantic, the core) would add half a second to every
job's start.
"""

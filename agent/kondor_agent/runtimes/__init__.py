"""The runtimes a job runs in, side by side: what starts, watches and ends one job.

- `kondor_agent.runtimes.process`: `ProcessJobs`, the JobRunner's launcher for `process`
  and `apptainer` jobs, over `process_launcher.ProcessLauncher` (a detached supervisor per
  job, in its own cgroup: `kondor_agent.execute`);
- `kondor_agent.runtimes.apptainer`: what an Apptainer job adds to a process job (its
  `apptainer exec` command line, the program, the PID namespace probe);
- `kondor_agent.runtimes.pod`: `PodLauncher`, `pod` jobs as Pods on this node, with
  `pod_cgroup` (a pod's cgroup, frozen for suspend) and `pod_hooks` (the job's hooks
  around its Pod).

The pod runtime and the process runtime import nothing of each other.
"""

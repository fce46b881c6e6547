"""The schedd (docs/jobs.md, steps 1, 4 and 5) as pure functions.

HTCondor's condor_schedd keeps the job queue and claims the slots the negotiator matched;
in Kondor the queue is the ExecutionJobs, the claim is the agent's answer in
`status.execution`, and the operator writes what the schedd would record. Its modules, by
what they are:

- `identity`: who a job is (its key, its submission order, its job ad);
- `follow`: one job's life from its commands, the agent's answers and MATCH_TIMEOUT;
- `cycle`: one negotiation cycle over the idle jobs (`plan_cycle`);
- `offers`: the slot ads a cycle offers;
- `change`: what is written for a job (`JobChange`, `status_patch`).

A decision returns `JobChange`s: the operator's new part of the status (an
`ExecutionJobStatus`; `execution` is the agent's and is never written), which
`status_patch` turns into the merge patch the operator sends.
"""

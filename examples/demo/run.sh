#!/usr/bin/env bash
# The demo: a local dev cluster (real control plane, three kwok nodes, one with four GPUs)
# with the Kondor operator and one agent per node; the demo SlotPolicies applied; the
# ExecutionPoints and condor_status printed; alice's job run and condor_q printed. Run by `make demo` (which builds what it needs).
# With REAL_NODE=NAME (`make demo-real`) the cluster also gets a real node (containerd, runc and
# a kubelet on this host; needs root) and alice runs a pod job on it for real.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.venv/bin}
STATE=${STATE:-.devcluster/demo}
PORT=${PORT:-16443}
REAL_NODE=${REAL_NODE:-}
REAL=()
NODES=3
if [ -n "$REAL_NODE" ]; then
  REAL=(--real-node "$REAL_NODE" --real-node-machine examples/machines/real-node.yaml)
  NODES=4
fi
export KUBECONFIG="$STATE/kubeconfig"
export PATH="$PWD/$BIN:$PATH"   # kubectl finds the kubectl-kondor plugin here

if [ -f "$STATE/state/pids.json" ]; then
  kondor dev-cluster down --state-dir "$STATE/state" >/dev/null 2>&1 || true
fi
kondor dev-cluster up --port "$PORT" --kubeconfig "$KUBECONFIG" --state-dir "$STATE/state" \
  --nodes examples/demo/machines/cpu-0.yaml examples/demo/machines/cpu-1.yaml \
          examples/demo/machines/gpu-0.yaml \
  "${REAL[@]}" --operator --agents --detach

echo; echo "+ kubectl apply -f examples/demo/policies/"
kubectl apply -f examples/demo/policies/
if [ -n "$REAL_NODE" ]; then
  echo "+ kubectl apply -f examples/demo/real/policy.yaml"
  kubectl apply -f examples/demo/real/policy.yaml
fi
for _ in $(seq 60); do
  [ "$(kubectl get executionpoints -o name | wc -l)" -ge "$NODES" ] && break
  sleep 0.5
done
kubectl wait executionpoints --all --for=condition=Ready --timeout=60s >/dev/null

echo; echo "+ kubectl get slotpolicies"
kubectl get slotpolicies
echo; echo "+ kubectl get executionpoints"
kubectl get executionpoints
echo; echo "+ kubectl kondor status"
kubectl kondor status

echo; echo "+ kubectl --context alice apply -f examples/demo/jobs/hello.yaml"
kubectl --context alice apply -f examples/demo/jobs/hello.yaml
for _ in $(seq 60); do
  [ "$(kubectl get ej hello -o jsonpath='{.status.jobStatus}')" = Completed ] && break
  sleep 0.5
done
if [ -n "$REAL_NODE" ]; then
  echo; echo "+ kubectl --context alice apply -f examples/demo/real/pod-job.yaml"
  kubectl --context alice apply -f examples/demo/real/pod-job.yaml
  for _ in $(seq 120); do
    [ "$(kubectl get ej real-pod -o jsonpath='{.status.jobStatus}')" = Completed ] && break
    sleep 0.5
  done
  echo; echo "+ kubectl get pods -o wide -l kondor.io/job=real-pod"
  kubectl get pods -o wide -l kondor.io/job=real-pod
  echo; echo "+ kubectl logs -l kondor.io/job=real-pod"
  kubectl logs -l kondor.io/job=real-pod
fi
echo; echo "+ kubectl get executionjobs"
kubectl get executionjobs
echo; echo "+ kubectl kondor q -all"
kubectl kondor q -all

cat <<NEXT

The dev cluster keeps running. Try:
  export KUBECONFIG=$KUBECONFIG PATH=$PWD/$BIN:\$PATH
  kubectl describe executionpoint gpu-0              # the slots and their ads
  kubectl kondor status -af Name Cpus Memory GPUs AssignedGPUs
  kubectl kondor status -constraint 'State == "Owner"'   # cpu-1's owner is busy
  kubectl edit slotpolicy batch                      # change the layout; slots re-carve
  kubectl get ej hello -o jsonpath='{.status.execution}'   # where it ran, exit code, usage
  kubectl --context bob delete ej hello              # refused: only its owner (alice) may
  kubectl kondor q -all -af Owner ExitCode RemoteHost
  kubectl apply -f - <<<'{"apiVersion":"kondor.io/v1alpha1","kind":"SlotPolicy","metadata":{"name":"bad"},"spec":{"start":"Cpus >"}}'
  kondor simulate --timeline examples/scenarios/desktop-day.yaml   # a day of policy, offline
Stop it with: $BIN/kondor dev-cluster down --state-dir $STATE/state
NEXT

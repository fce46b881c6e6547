#!/usr/bin/env bash
# The demo as users install Kondor: `helm install` of the chart on a dev cluster whose real
# node (containerd, runc and a kubelet on this host; needs root) has the image `make image`
# built; the operator and the agent run from it as pods; the demo SlotPolicies give the node's
# ExecutionPoint, published by the in-cluster agent; alice's job runs and completes through
# them. Run by `make demo-helm` (which builds the control plane, the image and fetches helm).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-.venv/bin}
STATE=${STATE:-.devcluster/helm}
PORT=${PORT:-16444}
NODE=${REAL_NODE:-kondor-real-0}
NAMESPACE=kondor-system
ARCHIVE=${IMAGE_ARCHIVE:-$("$BIN/python" tools/build_image.py)}
HELM=$("$BIN/python" tools/fetch_helm.py)
export KUBECONFIG="$STATE/kubeconfig"
export PATH="$PWD/$BIN:$PATH"   # kubectl finds the kubectl-kondor plugin here
started=$SECONDS

# A fresh cluster each time: `helm install`, not an upgrade of the last run's release.
if [ -d "$STATE/state" ]; then
  kondor dev-cluster down --state-dir "$STATE/state" >/dev/null 2>&1 || true
  rm -rf "$STATE"
fi
kondor dev-cluster up --port "$PORT" --kubeconfig "$KUBECONFIG" --state-dir "$STATE/state" \
  --real-node "$NODE" --real-node-machine examples/machines/real-node.yaml \
  --image "$ARCHIVE" --detach

echo; echo "+ helm install kondor helm/kondor -n $NAMESPACE --create-namespace -f examples/demo/helm-values.yaml --wait"
"$HELM" install kondor helm/kondor -n "$NAMESPACE" --create-namespace \
  -f examples/demo/helm-values.yaml --wait --timeout 5m
echo; echo "+ kubectl -n $NAMESPACE get pods -o wide"
kubectl -n "$NAMESPACE" get pods -o wide

echo; echo "+ kubectl apply -f examples/demo/policies/"
kubectl apply -f examples/demo/policies/
for _ in $(seq 120); do
  kubectl get executionpoint "$NODE" >/dev/null 2>&1 && break
  sleep 0.5
done
kubectl wait executionpoint "$NODE" --for=condition=Ready --timeout=120s >/dev/null
echo; echo "+ kubectl get executionpoints"
kubectl get executionpoints
echo; echo "+ kubectl kondor status"
kubectl kondor status

echo; echo "+ kubectl --context alice apply -f examples/demo/jobs/hello.yaml"
kubectl --context alice apply -f examples/demo/jobs/hello.yaml
for _ in $(seq 240); do
  [ "$(kubectl get ej hello -o jsonpath='{.status.jobStatus}')" = Completed ] && break
  sleep 0.5
done
echo; echo "+ kubectl get executionjobs"
kubectl get executionjobs
echo; echo "+ kubectl kondor q -all -af Owner JobStatus ExitCode RemoteHost"
kubectl kondor q -all -af Owner JobStatus ExitCode RemoteHost
[ "$(kubectl get ej hello -o jsonpath='{.status.jobStatus}')" = Completed ] || {
  echo "alice's job did not complete; see kubectl -n $NAMESPACE logs" >&2; exit 1; }

echo; echo "+ kubectl -n $NAMESPACE logs (each pod): no traceback"
failed=0
for pod in $(kubectl -n "$NAMESPACE" get pods -o name); do
  if kubectl -n "$NAMESPACE" logs "$pod" --all-containers | grep -q Traceback; then
    echo "$pod logged a traceback:" >&2
    kubectl -n "$NAMESPACE" logs "$pod" --all-containers | grep -A 20 Traceback >&2
    failed=1
  else
    echo "$pod: no traceback"
  fi
done
[ "$failed" = 0 ] || exit 1

cat <<NEXT

Done in $((SECONDS - started)) s. The dev cluster keeps running. Try:
  export KUBECONFIG=$KUBECONFIG PATH=$PWD/$BIN:\$PATH
  kubectl -n $NAMESPACE logs deploy/kondor-operator        # the operator, from the image
  kubectl -n $NAMESPACE logs ds/kondor-agent               # the agent on $NODE
  kubectl get ej hello -o jsonpath='{.status.execution}'     # where it ran, exit code, usage
  $HELM upgrade kondor helm/kondor -n $NAMESPACE -f examples/demo/helm-values.yaml \\
      --set agent.execution.enabled=true --wait          # jobs in cgroups, frozen on SUSPEND
  $HELM uninstall kondor -n $NAMESPACE                   # CRDs stay, as Helm keeps them
Stop it with: $BIN/kondor dev-cluster down --state-dir $STATE/state   (or make demo-helm-down)
NEXT

// Builds kwok for the development cluster (kondor_devcluster.build); its own module because kwok
// needs newer k8s.io libraries than the control plane's Kubernetes release.
module github.com/kondor/kondor/devcluster/controlplane/kwok

go 1.24.0

require sigs.k8s.io/kwok v0.7.0

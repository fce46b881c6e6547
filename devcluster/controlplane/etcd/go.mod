// Builds etcd for the development cluster (kondor_devcluster.build); its own module so that
// etcd's dependency versions stay the ones etcd was released with.
module github.com/kondor/kondor/devcluster/controlplane/etcd

go 1.23.0

require go.etcd.io/etcd/server/v3 v3.5.35

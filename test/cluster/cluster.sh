#!/usr/bin/env bash
# Runs a real single-node Kubernetes cluster for make test-cluster, entirely
# inside a network namespace that it creates, so that none of its addresses
# exists, or is routed or NATed, outside it:
#
#   test/cluster/cluster.sh up        start it; prints KUBECONFIG=<path>
#   test/cluster/cluster.sh exec CMD  run CMD in its network namespace, with KUBECONFIG
#   test/cluster/cluster.sh down      stop it and remove all it made
#   test/cluster/cluster.sh test CMD  up, exec CMD, and down whatever CMD did
#   test/cluster/cluster.sh restart-kubelet  stop the kubelet and start it again (the suite's fault)
#   test/cluster/cluster.sh switch-operator  run training-operator $TRAINING_OPERATOR_V1_9_BIN
#                                            with its CRD $MPIJOB_CRD_V1_9 in place of the first
#   test/cluster/cluster.sh switch-propeller BINARY  run flytepropeller from BINARY (PATCHED_PROPELLER_BIN,
#                                            or PROPELLER_BIN again) in place of the one running
#   test/cluster/cluster.sh switch-mpi-operator  stop the training-operator and flytepropeller, and
#                                            run mpi-operator $MPI_OPERATOR_BIN with its CRD
#                                            $MPIJOB_CRD_V2BETA1 in place of the v1 CRD
#
# The parts come from the environment: KUBEBUILDER_ASSETS (kube-apiserver, etcd:
# hack/envtest-assets.sh), KUBELET_BIN, KUBE_SCHEDULER_BIN,
# KUBE_CONTROLLER_MANAGER_BIN, PAUSE_BIN, KUBECTL_DELIVERY_BIN and
# CLUSTER_IMAGE_BIN, COREDNS_BIN (hack/cluster/build.sh), TRAINING_OPERATOR_BIN
# (hack/e2e-operators.sh), MPIJOB_CRD_V1, PROPELLER_BIN (Flyte's controller,
# test/cluster/propeller: hack/flyte-testdata.sh propeller), and IMAGE_TARS: image tarballs to
# import into the node's containerd. From Debian: containerd, runc, the CNI
# plugins, iproute2, iptables, openssl and docker-registry (make test-cluster
# installs them with hack/apt-install.sh).
#
# The registry, Debian's docker-registry (the CNCF Distribution registry),
# serves https://$registry with a certificate of the cluster's CA, which
# the node's containerd trusts through its hosts.toml: the suite pushes the
# release there, and the node pulls the webhook from it.
#
# The addresses, all inside the namespace: the node 10.217.0.1 (on
# the namespace's loopback, which the API server, the kubelet, the operator and the registry use), the
# Pods 10.218.0.0/24 (a CNI bridge), the Services 10.219.0.0/24. The one
# Service Pods reach, the API server's own (the launcher reads Pods through
# it), has an iptables DNAT rule in the namespace, in place of kube-proxy; the
# API server reaches the webhook's Service by its endpoints
# (--enable-aggregator-routing). The cluster's DNS, CoreDNS with its
# kubernetes plugin, answers at the node's address for cluster.local: the
# Pods' nameserver (mpi-operator's launcher reaches its workers by their
# names behind the job's headless Service).
#
# Everything lives in $CLUSTER_STATE; the processes it starts, and their
# children (containerd's shims), in the cgroup $daemons_cgroup, and the
# Pods in the kubelet's cgroup root $cgroup_root: down kills what is in them
# by PID, unmounts what is mounted under $CLUSTER_STATE, removes the cgroups,
# the namespace and $CLUSTER_STATE. Each step is logged with its time. The
# logs of the cluster's parts (flytepropeller's, with the events of its log
# sink, among them) are kept in $CLUSTER_LOGS, when set, by down.
set -euo pipefail
shopt -s inherit_errexit

netns=${CLUSTER_NETNS:-flyte-mpi-webhook}
state=${CLUSTER_STATE:-/var/tmp/flyte-mpi-webhook-cluster}
cgroup_root=flyte-mpi-webhook-cluster
daemons_cgroup=/sys/fs/cgroup/pids/flyte-mpi-webhook-cluster-daemons
node=flyte-mpi-webhook-node
node_ip=10.217.0.1
pod_cidr=10.218.0.0/24
service_cidr=10.219.0.0/24
api_service_ip=10.219.0.1
cluster_domain=cluster.local
registry=$node_ip:5000
# flytepropeller's metrics, profiling and health checks (its prof-port), on the
# namespace's addresses.
propeller_port=10254
# Where the training-operator looks for its webhook certificate (a constant in its code),
# in its own mount namespace.
operator_cert_dir=/tmp/k8s-webhook-server/serving-certs
# The images the node needs besides IMAGE_TARS: the training-operator's
# launcher takes kubectl from the image its --mpi-kubectl-delivery-image
# defaults to, v1.8's the first, v1.9's the second.
pause_image=flyte-mpi-webhook.test/pause:1
delivery_images=(docker.io/kubeflow/kubectl-delivery:latest ghcr.io/kubeflow/training-v1/kubectl-delivery:latest)

started=$SECONDS
log() { echo "cluster: $(date -u +%T) [+$((SECONDS - started))s] $*" >&2; }
# die logs why it gives up, with the end of every log of the cluster's parts.
die() {
	log "$*"
	local file
	for file in "$state"/logs/*.log; do
		[[ -f "$file" ]] || continue
		echo "----- the end of $file" >&2
		tail -n 15 "$file" >&2
	done
	exit 1
}
in_netns() { nsenter --net="/run/netns/$netns" "$@"; }

# await WHAT SECONDS CMD... runs CMD every half second until it succeeds, or
# fails after SECONDS, naming WHAT.
await() {
	local what=$1 deadline=$((SECONDS + $2))
	shift 2
	until "$@" > /dev/null 2>&1; do
		((SECONDS < deadline)) || die "$what: not within ${deadline}s; see $state/logs"
		sleep 0.5
	done
	log "$what"
}

# start NAME CMD... starts CMD in the namespace and in the daemons' cgroup,
# logging to $state/logs/NAME.log, and records its PID.
start() {
	local name=$1
	shift
	(
		echo "$BASHPID" > "$daemons_cgroup/cgroup.procs"
		exec nsenter --net="/run/netns/$netns" "$@"
	) > "$state/logs/$name.log" 2>&1 &
	echo $! > "$state/pids/$name"
	log "started $name (pid $!)"
}

need() {
	local var
	for var in "$@"; do
		[[ -n "${!var:-}" ]] || die "$var is not set (make test-cluster sets it)"
	done
}

kubectl_() { in_netns env KUBECONFIG="$state/admin.kubeconfig" "$KUBECTL" "$@"; }

certs() {
	local dir=$state/pki
	mkdir -p "$dir"
	cd "$dir"
	# Elliptic-curve keys: RSA ones take seconds each on a busy machine.
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=flyte-mpi-webhook-cluster-ca \
		-keyout ca.key -out ca.crt 2> /dev/null
	# cert NAME SUBJECT [SANS]
	cert() {
		local ext=()
		if [[ -n "${3:-}" ]]; then
			printf 'subjectAltName=%s\n' "$3" > "$1.ext"
			ext=(-extfile "$1.ext")
		fi
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2> /dev/null
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out "$1.crt" "${ext[@]}" 2> /dev/null
	}
	cert apiserver /CN=kube-apiserver \
		"IP:$node_ip,IP:$api_service_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin /O=system:masters/CN=cluster-admin
	cert kubelet "/O=system:nodes/CN=system:node:$node"
	cert registry /CN=flyte-mpi-webhook-registry "IP:$node_ip"
	openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2> /dev/null
	openssl ec -in sa.key -pubout -out sa.pub 2> /dev/null
	cd - > /dev/null
	kubeconfig admin
	kubeconfig kubelet
}

# kubeconfig NAME writes $state/NAME.kubeconfig, with the certificate NAME.
kubeconfig() {
	cat > "$state/$1.kubeconfig" <<-YAML
		apiVersion: v1
		kind: Config
		clusters:
		- name: cluster
		  cluster:
		    server: https://$node_ip:6443
		    certificate-authority: $state/pki/ca.crt
		users:
		- name: $1
		  user:
		    client-certificate: $state/pki/$1.crt
		    client-key: $state/pki/$1.key
		contexts:
		- name: $1
		  context: {cluster: cluster, user: $1}
		current-context: $1
	YAML
}

configs() {
	mkdir -p "$state/cni/net.d" "$state/containerd" "$state/containerd/certs.d/$registry" "$state/registry"
	cat > "$state/cni/net.d/10-pods.conflist" <<-JSON
		{"cniVersion": "1.0.0", "name": "flyte-mpi-webhook-pods", "plugins": [
		  {"type": "bridge", "bridge": "fmw-pods", "isGateway": true, "ipMasq": false, "hairpinMode": true,
		   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]],
		            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$state/cni/ipam"}}]}
	JSON
	cat > "$state/containerd/config.toml" <<-TOML
		version = 2
		root = "$state/containerd/root"
		state = "$state/containerd/state"
		disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.aufs",
		  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
		[grpc]
		  address = "$state/containerd/containerd.sock"
		[ttrpc]
		  address = "$state/containerd/containerd.sock.ttrpc"
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$state/containerd/opt"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "$pause_image"
		  # Root here lacks CAP_SYS_RESOURCE: without this, every sandbox fails
		  # with "can't get final child's PID from pipe: EOF".
		  restrict_oom_score_adj = true
		  netns_mounts_under_state_dir = true
		  disable_apparmor = true
		  stream_server_address = "127.0.0.1"
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "overlayfs"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        SystemdCgroup = false
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "/usr/lib/cni"
		    conf_dir = "$state/cni/net.d"
		  [plugins."io.containerd.grpc.v1.cri".registry]
		    config_path = "$state/containerd/certs.d"
	TOML
	# The node trusts the registry's CA, and only for the registry.
	cat > "$state/containerd/certs.d/$registry/hosts.toml" <<-TOML
		server = "https://$registry"
		[host."https://$registry"]
		  capabilities = ["pull", "resolve"]
		  ca = "$state/pki/ca.crt"
	TOML
	cat > "$state/registry/config.yml" <<-YAML
		version: 0.1
		log: {level: warn, accesslog: {disabled: true}}
		storage:
		  filesystem: {rootdirectory: $state/registry/data}
		http:
		  addr: $registry
		  tls: {certificate: $state/pki/registry.crt, key: $state/pki/registry.key}
	YAML
	: > "$state/resolv.conf"
	# Flyte's controller as its README runs it locally, without what the
	# suite does not need: no flyteadmin (events to its log, no launch plans,
	# an admin endpoint never dialled), no data catalog, no blob store (a task
	# without inputs or outputs reads none: the node's inputs, written by
	# propeller itself, stay in memory), the FlyteWorkflow CRD of its own
	# making, and the mpi plugin alone (an empty list would watch every
	# plugin's CRD).
	cat > "$state/propeller.yaml" <<-YAML
		propeller:
		  kube-config: $state/admin.kubeconfig
		  create-flyteworkflow-crd: true
		  enable-admin-launcher: false
		  publish-k8s-events: true
		  limit-namespace: all
		  workers: 4
		  workflow-reeval-duration: 5s
		  downstream-eval-duration: 5s
		  # A scheme, which the task's output reader needs, on the in-memory store's paths.
		  metadata-prefix: mem://flyte/metadata
		  prof-port: $propeller_port
		tasks:
		  task-plugins:
		    enabled-plugins: [mpi]
		storage:
		  type: mem
		event:
		  type: log
		catalog-cache:
		  type: noop
		admin:
		  endpoint: dns:///127.0.0.1:1
		  insecure: true
		logger:
		  level: 4
		  formatter: {type: text}
	YAML
	# The cluster's DNS, as a cluster's CoreDNS: the Services and Pods of
	# cluster.local, from the API server; no other zone.
	cat > "$state/Corefile" <<-CONF
		$cluster_domain:53 {
		  errors
		  kubernetes $cluster_domain {
		    kubeconfig $state/admin.kubeconfig
		  }
		}
	CONF
	cat > "$state/kubelet.yaml" <<-YAML
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		# This machine runs cgroup v1, and containerd 1.6 cannot tell the kubelet its driver.
		failCgroupV1: false
		cgroupDriver: cgroupfs
		cgroupRoot: /$cgroup_root
		# The chains would be in the namespace, but nothing here needs them.
		makeIPTablesUtilChains: false
		containerRuntimeEndpoint: unix://$state/containerd/containerd.sock
		address: $node_ip
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true}
		  x509: {clientCAFile: $state/pki/ca.crt}
		authorization: {mode: Webhook}
		# The cluster's DNS (CoreDNS), and nothing beyond it.
		clusterDNS: [$node_ip]
		clusterDomain: $cluster_domain
		resolvConf: $state/resolv.conf
		podLogsDir: $state/pod-logs
		failSwapOn: false
		# Mounted ConfigMaps (the operator's host discovery script) follow in seconds.
		syncFrequency: 5s
		evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
	YAML
}

# cgroups makes the kubelet's cgroup root in every hierarchy: the kubelet
# needs it to exist, and a new cpuset inherits no CPUs or memory nodes.
cgroups() {
	local hierarchy
	for hierarchy in /sys/fs/cgroup/*/; do
		[[ "$hierarchy" == */unified/ ]] && continue
		mkdir -p "$hierarchy$cgroup_root"
	done
	cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$cgroup_root/cpuset.cpus"
	cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$cgroup_root/cpuset.mems"
}

network() {
	# ip netns add makes /run/netns a mount point of its own when it is not
	# one yet: down removes it then, and only then.
	mountpoint -q /run/netns || touch "$state/run-netns-is-ours"
	ip netns add "$netns"
	ip -n "$netns" link set lo up
	# The node's address, on the namespace's loopback: the kernel here has no dummy interfaces.
	ip -n "$netns" addr add "$node_ip/32" dev lo
	# kube-proxy's one rule that the Pods here need: the API server's Service.
	in_netns iptables -t nat -A PREROUTING -d "$api_service_ip/32" -p tcp --dport 443 \
		-j DNAT --to-destination "$node_ip:6443"
	log "network namespace $netns: node $node_ip, Pods $pod_cidr, Services $service_cidr"
}

# vacant fails when a cluster is there already: another run's, which this
# one must neither use nor tear down.
vacant() {
	[[ ! -e "/run/netns/$netns" && ! -e "$state" ]] || die "a cluster is there already ($state, netns $netns): run $0 down"
}

up() {
	need KUBEBUILDER_ASSETS KUBELET_BIN KUBE_SCHEDULER_BIN KUBE_CONTROLLER_MANAGER_BIN PAUSE_BIN \
		KUBECTL_DELIVERY_BIN CLUSTER_IMAGE_BIN COREDNS_BIN TRAINING_OPERATOR_BIN MPIJOB_CRD_V1 KUBECTL PROPELLER_BIN
	vacant
	mkdir -p "$state"/{logs,pids,images}
	echo "$KUBECTL" > "$state/kubectl.bin"
	mkdir -p "$daemons_cgroup"
	cgroups
	certs
	configs
	network

	local etcd_dir=$state/etcd
	start etcd "$KUBEBUILDER_ASSETS/etcd" --data-dir "$etcd_dir" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --unsafe-no-fsync
	start containerd containerd --config "$state/containerd/config.toml"
	start registry docker-registry serve "$state/registry/config.yml"
	start kube-apiserver "$KUBEBUILDER_ASSETS/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address "$node_ip" --advertise-address "$node_ip" --secure-port 6443 \
		--service-cluster-ip-range "$service_cidr" --enable-aggregator-routing --kubelet-preferred-address-types InternalIP \
		--tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
		--client-ca-file "$state/pki/ca.crt" --authorization-mode Node,RBAC \
		--kubelet-client-certificate "$state/pki/admin.crt" --kubelet-client-key "$state/pki/admin.key" \
		--service-account-issuer https://kubernetes.default.svc \
		--service-account-key-file "$state/pki/sa.pub" --service-account-signing-key-file "$state/pki/sa.key" \
		--cert-dir "$state/pki/apiserver"
	await "containerd is up" 60 in_netns ctr --address "$state/containerd/containerd.sock" version
	await "the registry listens on $registry" 60 in_netns bash -c ": <> /dev/tcp/${registry/://}"
	images
	await "the API server is ready" 120 kubectl_ get --raw /readyz
	start kube-controller-manager "$KUBE_CONTROLLER_MANAGER_BIN" --kubeconfig "$state/admin.kubeconfig" \
		--authentication-kubeconfig "$state/admin.kubeconfig" --authorization-kubeconfig "$state/admin.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --root-ca-file "$state/pki/ca.crt" \
		--service-account-private-key-file "$state/pki/sa.key" --use-service-account-credentials \
		--cluster-signing-cert-file "$state/pki/ca.crt" --cluster-signing-key-file "$state/pki/ca.key"
	start kube-scheduler "$KUBE_SCHEDULER_BIN" --kubeconfig "$state/admin.kubeconfig" \
		--authentication-kubeconfig "$state/admin.kubeconfig" --authorization-kubeconfig "$state/admin.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false
	dns
	kubelet
	operator "$TRAINING_OPERATOR_BIN" "$MPIJOB_CRD_V1"
	propeller
	echo "KUBECONFIG=$state/admin.kubeconfig"
	log "the cluster is up"
}

# kubelet starts the kubelet, and waits until its node is Ready.
kubelet() {
	echo "$KUBELET_BIN" > "$state/kubelet.bin"
	start kubelet "$KUBELET_BIN" --config "$state/kubelet.yaml" --kubeconfig "$state/kubelet.kubeconfig" \
		--root-dir "$state/kubelet" --cert-dir "$state/kubelet/pki" --hostname-override "$node" --node-ip "$node_ip"
	await "node $node is Ready" 120 kubectl_ wait --for=condition=Ready "node/$node" --timeout=1s
}

# dns runs the cluster's DNS, CoreDNS, as a process: a copy in $state, as the
# operators', so that leftovers finds it by its path.
dns() {
	cp "$COREDNS_BIN" "$state/coredns"
	start coredns "$state/coredns" -conf "$state/Corefile"
	await "the cluster DNS listens on $node_ip:53" 60 in_netns bash -c ": <> /dev/tcp/$node_ip/53"
}

# stop_part stops the part NAME that start started: SIGTERM to its recorded
# PID, and a wait until it is gone; then forgets the PID, so that down never
# signals it, which another process may have by then.
stop_part() {
	local name=$1 pid
	pid=$(cat "$state/pids/$name")
	kill -TERM "$pid" 2> /dev/null || true
	while kill -0 "$pid" 2> /dev/null; do sleep 0.2; done
	rm "$state/pids/$name"
	log "stopped $name (pid $pid)"
}

# restart_kubelet stops the kubelet, as an upgrade or a crash would, and starts it again.
restart_kubelet() {
	stop_part kubelet
	KUBELET_BIN=$(cat "$state/kubelet.bin")
	kubelet
}

# images imports the pause and kubectl-delivery images and $IMAGE_TARS into the node's containerd.
images() {
	"$CLUSTER_IMAGE_BIN" -name "$pause_image" -file "$PAUSE_BIN:/pause" -entrypoint /pause -user 65535 \
		-out "$state/images/pause.tar"
	# kubectl-delivery copies the static kubectl beside it to the launcher's /opt/kube.
	"$CLUSTER_IMAGE_BIN" -name "${delivery_images[0]}" -file "$KUBECTL_DELIVERY_BIN:/kubectl-delivery" \
		-file "$KUBECTL:/bin/kubectl" -entrypoint /kubectl-delivery -out "$state/images/kubectl-delivery.tar"
	local tar ctr=(ctr --address "$state/containerd/containerd.sock" -n k8s.io)
	for tar in "$state/images/pause.tar" "$state/images/kubectl-delivery.tar" ${IMAGE_TARS:-}; do
		in_netns "${ctr[@]}" images import "$tar" >&2
	done
	in_netns "${ctr[@]}" images tag "${delivery_images[0]}" "${delivery_images[1]}" > /dev/null
	log "imported the images: $(in_netns ctr --address "$state/containerd/containerd.sock" -n k8s.io images ls -q | tr '\n' ' ')"
}

# operator runs training-operator as a process, as test/e2e does: its
# manifests run it from an image that would need its Go build to be static and
# its own webhook Service reachable; a process needs neither. It runs in a
# mount namespace of its own whose /tmp is $state/operator-tmp, so that the
# directory where it looks for its webhook certificate (a constant in its code)
# is the cluster's and no other training-operator's on the machine.
#
# operator BIN CRD applies the MPIJob CRD of file CRD and runs the
# training-operator BIN, with a certificate Secret of its own making.
operator() {
	local bin=$1 crd=$2
	kubectl_ apply --server-side --force-conflicts -f "$crd" > /dev/null
	kubectl_ create namespace training-operator --dry-run=client -o yaml | kubectl_ apply -f - > /dev/null
	kubectl_ -n training-operator delete secret training-operator-webhook-cert --ignore-not-found > /dev/null
	kubectl_ -n training-operator create secret generic training-operator-webhook-cert > /dev/null
	local certs=$state/operator-tmp/${operator_cert_dir#/tmp/}
	rm -rf "$certs"
	mkdir -p "$certs"
	# A copy in $state: the cached binary may live under /tmp (a HOME or
	# E2E_CACHE there), which the private /tmp would hide.
	cp "$bin" "$state/training-operator"
	start training-operator unshare --mount --propagation private \
		sh -c 'mount --bind "$0" /tmp && exec "$@"' "$state/operator-tmp" \
		env -i KUBECONFIG="$state/admin.kubeconfig" MY_POD_NAMESPACE=training-operator \
		"$state/training-operator" --enable-scheme mpijob --leader-elect=false \
		--metrics-bind-address 0 --health-probe-bind-address 0 --webhook-server-port 9443
	await "the training-operator filled its certificate Secret" 60 \
		bash -c "[[ -n \"\$(KUBECONFIG=$state/admin.kubeconfig nsenter --net=/run/netns/$netns $KUBECTL -n training-operator get secret training-operator-webhook-cert -o 'jsonpath={.data.tls\\.crt}')\" ]]"
	# Play the kubelet that would mount the Secret into its Pod.
	local key
	for key in tls.crt tls.key ca.crt; do
		kubectl_ -n training-operator get secret training-operator-webhook-cert -o "jsonpath={.data.${key//./\\.}}" |
			base64 -d > "$certs/$key"
	done
	await "the CRD MPIJob kubeflow.org/v1 is served" 60 kubectl_ get mpijobs.kubeflow.org -A
}

# propeller runs Flyte's own controller, flytepropeller, as a process with
# $state/propeller.yaml, once the MPIJob CRD, which its mpi plugin watches,
# is served; it creates the FlyteWorkflow CRD.
propeller() {
	# A copy in $state, as the training-operator's: leftovers finds it by its path.
	cp "$PROPELLER_BIN" "$state/flytepropeller"
	start propeller "$state/flytepropeller" --config "$state/propeller.yaml"
	await "flytepropeller answers on 127.0.0.1:$propeller_port" 60 in_netns bash -c ": <> /dev/tcp/127.0.0.1/$propeller_port"
	await "the CRD FlyteWorkflow flyte.lyft.com/v1alpha1 is served" 60 kubectl_ get flyteworkflows.flyte.lyft.com -A
}

# switch_propeller BINARY stops flytepropeller, as an upgrade would, and runs
# the one of BINARY with the same configuration: the build with the upstream
# fix (hack/flyte-testdata.sh propeller-patched), or the first again. Its log
# goes on at $state/logs/propeller.log; the one before is kept as
# propeller-N.log.
switch_propeller() {
	[[ -x ${1:-} ]] || die "switch-propeller: no flytepropeller binary at '${1:-}'"
	stop_part propeller
	local n=1
	while [[ -e "$state/logs/propeller-$n.log" ]]; do n=$((n + 1)); done
	mv "$state/logs/propeller.log" "$state/logs/propeller-$n.log"
	PROPELLER_BIN=$1
	propeller
}

# switch_operator stops the training-operator, as an upgrade would, and
# runs the one of TRAINING_OPERATOR_V1_9_BIN with its CRD.
switch_operator() {
	need TRAINING_OPERATOR_V1_9_BIN MPIJOB_CRD_V1_9
	stop_part training-operator
	operator "$TRAINING_OPERATOR_V1_9_BIN" "$MPIJOB_CRD_V1_9"
}

# switch_mpi_operator runs mpi-operator $MPI_OPERATOR_BIN in place of the
# training-operator. Both serve their MPIJobs under one CRD name,
# mpijobs.kubeflow.org, so one API server serves one at a time: the
# training-operator stops, and flytepropeller, whose mpi plugin watches
# kubeflow.org/v1 MPIJobs; the v1 CRD goes (with any v1 MPIJob), and
# mpi-operator's, kubeflow.org/v2beta1, comes. mpi-operator runs as a
# process, as make test-e2e runs it: its health check on :8080 (a constant
# in its code) is the namespace's.
switch_mpi_operator() {
	need MPI_OPERATOR_BIN MPIJOB_CRD_V2BETA1
	stop_part training-operator
	stop_part propeller
	kubectl_ delete customresourcedefinition mpijobs.kubeflow.org --wait > /dev/null
	log "deleted the CRD MPIJob kubeflow.org/v1"
	kubectl_ apply --server-side -f "$MPIJOB_CRD_V2BETA1" > /dev/null
	kubectl_ create namespace mpi-operator --dry-run=client -o yaml | kubectl_ apply -f - > /dev/null
	cp "$MPI_OPERATOR_BIN" "$state/mpi-operator"
	start mpi-operator env -i "$state/mpi-operator" --kubeConfig "$state/admin.kubeconfig" --lock-namespace mpi-operator \
		--kube-api-qps 100 --kube-api-burst 200
	await "the CRD MPIJob kubeflow.org/v2beta1 is served" 60 kubectl_ get mpijobs.v2beta1.kubeflow.org -A
	await "mpi-operator answers its health check on :8080" 60 in_netns bash -c ": <> /dev/tcp/127.0.0.1/8080"
}

# stop_pids kills the processes we started, by the PIDs recorded at start and
# by those in the daemons' and the Pods' cgroups, politely first.
stop_pids() {
	local name pid pids=()
	for name in propeller training-operator mpi-operator kubelet coredns kube-scheduler kube-controller-manager kube-apiserver etcd \
		registry; do
		[[ -f "$state/pids/$name" ]] && pids+=("$(cat "$state/pids/$name")")
	done
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
	local deadline=$((SECONDS + 15))
	for pid in "${pids[@]}"; do
		while kill -0 "$pid" 2> /dev/null && ((SECONDS < deadline)); do sleep 0.2; done
		kill -KILL "$pid" 2> /dev/null || true
	done
	# The containers, with the kubelet gone: kill their tasks through containerd, so that it cleans up after them.
	if [[ -S "$state/containerd/containerd.sock" ]]; then
		local ctr=(ctr --address "$state/containerd/containerd.sock" -n k8s.io) id
		for id in $(in_netns "${ctr[@]}" tasks ls -q 2> /dev/null); do
			in_netns "${ctr[@]}" tasks kill -s KILL "$id" > /dev/null 2>&1 || true
		done
		for id in $(in_netns "${ctr[@]}" tasks ls -q 2> /dev/null); do
			in_netns timeout 10 "${ctr[@]}" tasks delete -f "$id" > /dev/null 2>&1 || true
		done
		for id in $(in_netns "${ctr[@]}" containers ls -q 2> /dev/null); do
			in_netns "${ctr[@]}" containers delete "$id" > /dev/null 2>&1 || true
			# libcni's cache of the sandbox's networks (loopback, the bridge), which
			# the kubelet, gone, no longer tears down: the one path containerd does
			# not let us move.
			rm -f /var/lib/cni/results/*-"$id"-*
		done
	fi
	[[ -f "$state/pids/containerd" ]] && kill -TERM "$(cat "$state/pids/containerd")" 2> /dev/null || true
	# Whatever is left in our cgroups (shims, containers): by PID.
	local round
	for round in 1 2 3 4 5 6 7 8 9 10; do
		pids=()
		local procs
		for procs in "$daemons_cgroup"/cgroup.procs $(find /sys/fs/cgroup/pids/$cgroup_root -name cgroup.procs 2> /dev/null); do
			[[ -f "$procs" ]] && mapfile -t -O "${#pids[@]}" pids < "$procs"
		done
		((${#pids[@]} == 0)) && break
		for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null || true; done
		sleep 0.3
	done
}

down() {
	log "tearing down"
	[[ -d "$state" ]] && stop_pids
	# Mounts under the state directory (the Pods' volumes and network
	# namespaces, the containers' root filesystems), innermost first.
	local mnt
	while read -r mnt; do
		umount "$mnt" 2> /dev/null || umount -l "$mnt" || true
	done < <(awk -v s="$state" 'index($2, s) == 1 {print $2}' /proc/mounts | sort -r)
	# The cgroups, innermost first: the kubelet's in every hierarchy, and the daemons'.
	local dir
	for dir in /sys/fs/cgroup/*/"$cgroup_root" "$daemons_cgroup"; do
		[[ -d "$dir" ]] && find "$dir" -depth -type d -exec rmdir {} + 2> /dev/null || true
	done
	[[ -e "/run/netns/$netns" ]] && ip netns delete "$netns"
	local run_netns_ours=false
	[[ -f "$state/run-netns-is-ours" ]] && run_netns_ours=true
	# The /run/netns that ip netns add mounted, unless another namespace has come since.
	if $run_netns_ours && mountpoint -q /run/netns && [[ -z "$(ls -A /run/netns)" ]]; then
		umount /run/netns && rmdir /run/netns
	fi
	rmdir /var/lib/cni/results /var/lib/cni 2> /dev/null || true # when nothing else left anything there
	if [[ -n "${CLUSTER_LOGS:-}" && -d "$state/logs" ]]; then
		rm -rf "$CLUSTER_LOGS"
		mkdir -p "$(dirname "$CLUSTER_LOGS")"
		cp -R "$state/logs" "$CLUSTER_LOGS"
		log "kept the logs of the cluster's parts in $CLUSTER_LOGS"
	fi
	rm -rf "$state"
	leftovers "$run_netns_ours"
	log "torn down"
}

# leftovers fails when anything of the cluster is left on the machine; with
# true, the /run/netns mount that the cluster made is too, unless another
# network namespace lives there now.
leftovers() {
	local left=()
	[[ -e "/run/netns/$netns" ]] && left+=("network namespace $netns")
	[[ "${1:-false}" == true ]] && mountpoint -q /run/netns && [[ -z "$(ls -A /run/netns)" ]] && left+=("the mount /run/netns")
	grep -q " $state" /proc/mounts && left+=("mounts under $state")
	compgen -G "/sys/fs/cgroup/*/$cgroup_root" > /dev/null && left+=("cgroups $cgroup_root")
	[[ -d "$daemons_cgroup" ]] && left+=("cgroup $daemons_cgroup")
	[[ -e "$state" ]] && left+=("$state")
	ip link show fmw-pods > /dev/null 2>&1 && left+=("bridge fmw-pods outside the namespace")
	# Ours is gone with the cluster's cgroup; one left would be the Debian
	# package's own service, which a machine without policy-rc.d starts.
	pgrep -x docker-registry > /dev/null && left+=("a docker-registry process: $(pgrep -a -x docker-registry)")
	local part
	for part in flytepropeller coredns mpi-operator; do
		pgrep -f "^$state/$part" > /dev/null && left+=("a $part process: $(pgrep -a -f "^$state/$part")")
	done
	((${#left[@]} == 0)) || die "left behind: ${left[*]}"
}

case "${1:-}" in
up) up ;;
down) down ;;
restart-kubelet)
	KUBECTL=$(cat "$state/kubectl.bin")
	restart_kubelet
	;;
switch-operator)
	KUBECTL=$(cat "$state/kubectl.bin")
	switch_operator
	;;
switch-propeller)
	KUBECTL=$(cat "$state/kubectl.bin")
	switch_propeller "${2:-}"
	;;
switch-mpi-operator)
	KUBECTL=$(cat "$state/kubectl.bin")
	switch_mpi_operator
	;;
exec)
	shift
	in_netns env KUBECONFIG="$state/admin.kubeconfig" "$@"
	;;
test)
	shift
	vacant
	trap down EXIT
	up > /dev/null
	log "running $*"
	start_test=$SECONDS
	in_netns env KUBECONFIG="$state/admin.kubeconfig" CLUSTER_SCRIPT="$(realpath "$0")" \
		CONTAINERD_ADDRESS="$state/containerd/containerd.sock" REGISTRY="$registry" REGISTRY_CA="$state/pki/ca.crt" \
		PROPELLER_LOG="$state/logs/propeller.log" "$@"
	log "$1 took $((SECONDS - start_test))s"
	;;
*)
	echo "usage: $0 up|down|exec CMD...|test CMD...|restart-kubelet|switch-operator|switch-propeller BINARY|switch-mpi-operator" >&2
	exit 2
	;;
esac

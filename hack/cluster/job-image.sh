#!/usr/bin/env bash
# Prints JOB_IMAGE_TAR=<path>: the image of make test-cluster's MPI and
# Horovod jobs, as a tarball for `ctr images import`, named as Flyte's task
# names its image (testdata/flyte), so that its Pods find it on the node; and
# JOB_ENTRYPOINT_IMAGE_TAR=<path>, the same image with an ENTRYPOINT, named
# $JOB_ENTRYPOINT_IMAGE (see below). It
# has what an MPI image for Flyte has: Debian's Open MPI (mpirun, orted) and
# mpi4py, `python`, and the task's code, hack/cluster/job/task.py, where
# Flyte's command lines start it (/opt/venv/bin/entrypoint.py, pyflyte-execute);
# hack/cluster/job/horovodrun in place of Horovod's; and the sshd a task may
# declare as its worker command, with its config at /home/jobuser/.sshd_config,
# set up as mpi-operator's own images are (user jobuser, port 2222, the keys of
# mpi-operator's Secret, and ssh_config's host checks off for its launcher; a
# host key of the image's own, and /run/sshd, for root on the training-operator).
# Built with debootstrap (Debian bookworm, minbase) from the machine's own apt
# source and packed by $CLUSTER_IMAGE_BIN (hack/cluster/build.sh); cached in
# $CLUSTER_CACHE/job-rootfs-<hash>/ and job-<hash>/.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flyte-mpi-webhook/cluster}
image=${JOB_IMAGE:-ghcr.io/flyteorg/flytecookbook:kfmpi-horovod}
# The image with an ENTRYPOINT that does not run the container's args as a
# command: the training script, to which the args are its flags, as the
# training-operator's own examples build theirs (examples/pytorch/mnist:
# ENTRYPOINT ["python", "/opt/mnist/src/mnist.py"]). Its script is task.py,
# which, started with no MPI around it, fails with exit code 2, as a script
# whose argparse meets flags it does not know does.
entrypoint_image=${JOB_ENTRYPOINT_IMAGE:-flyte-mpi-webhook.test/job:entrypoint}
log() { echo "job-image: $(date -u +%T) $*" >&2; }

# The image is the root filesystem (debootstrap, the user, the host key and
# sshd config), cached apart, since it takes minutes, and a layer for each of
# task.py and horovodrun, which change more often and take no time.
: "${CLUSTER_IMAGE_BIN:?set it to the image builder that hack/cluster/build.sh prints}"
mkdir -p "$cache"
rootfs_key=$( (cd "$here" && sed -n '/^# rootfs-begin/,/^# rootfs-end/p' job-image.sh && cat job/sshd_config) | sha256sum | cut -c1-16)
rootfs_tar="$cache/job-rootfs-$rootfs_key/rootfs.tar"
key=$( (cd "$here" && echo "$image $entrypoint_image $rootfs_key" && sha256sum job/task.py job/horovodrun "$CLUSTER_IMAGE_BIN") |
	sha256sum | cut -c1-16)
dir="$cache/job-$key"
if [[ -f "$dir/image.tar" && -f "$dir/entrypoint.tar" ]]; then
	echo "JOB_IMAGE_TAR=$dir/image.tar"
	echo "JOB_ENTRYPOINT_IMAGE_TAR=$dir/entrypoint.tar"
	exit 0
fi
start=$SECONDS
tmp=$(mktemp -d "$cache/.job-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# rootfs-begin
if [[ ! -f "$rootfs_tar" ]]; then
	# The Debian mirror apt uses here, so that nothing else is reached.
	mirror=$(apt-get indextargets --format '$(URI)' 'Created-By: Packages' 2> /dev/null |
		sed -n 's#^\(.*\)/dists/bookworm/.*#\1#p' | head -n 1)
	if [[ -z "$mirror" ]]; then
		log "no apt source for Debian bookworm on this machine: run apt-get update"
		exit 1
	fi
	root="$tmp/rootfs"
	packages=openmpi-bin,python3-mpi4py,python-is-python3,openssh-server
	log "debootstrap bookworm (minbase, $packages) into $root"
	debootstrap --variant=minbase --include="$packages" \
		bookworm "$root" "$mirror" > "$tmp/debootstrap.log" 2>&1 || { tail -n 30 "$tmp/debootstrap.log" >&2; exit 1; }
	log "debootstrap took $((SECONDS - start))s"
	# The sshd of Worker(command=["/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"]),
	# as flytekitplugins-kfmpi's README declares it, set up as mpi-operator
	# v0.8.2's build/base image is: a user (jobuser, uid 1000, whom the
	# v2beta1 jobs run as: its runAsUser), sshd on a port that user can bind
	# (its 2222), the keys from mpi-operator's Secret, mounted at the job's
	# sshAuthMountPath, /home/jobuser/.ssh. The launcher's ssh, as there,
	# checks no host key and writes no known_hosts (the Secret is read-only).
	# On the training-operator nothing logs in: its launcher reaches the
	# workers by kubectl exec, and the ranks only check that sshd answers,
	# with the image's own host key (/run/sshd: sshd run by root needs it).
	chroot "$root" useradd --create-home --uid 1000 --shell /bin/bash --password '*' jobuser
	install -d -m 0700 -o 1000 -g 1000 "$root/home/jobuser/.ssh" "$root/home/jobuser/.sshd"
	ssh-keygen -q -t ed25519 -N '' -C worker -f "$root/home/jobuser/.sshd/ssh_host_ed25519_key"
	install -m 0644 "$here/job/sshd_config" "$root/home/jobuser/.sshd_config"
	chown -R 1000:1000 "$root/home/jobuser"
	install -d -m 0755 "$root/run/sshd"
	port=$(sed -n 's/^Port //p' "$here/job/sshd_config")
	sed -i -e 's/[ #]\(.*StrictHostKeyChecking \).*/ \1no/g' -e "s/[ #]\(.*Port \).*/ \1$port/g" "$root/etc/ssh/ssh_config"
	echo "    UserKnownHostsFile /dev/null" >> "$root/etc/ssh/ssh_config"
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/etc/ssh/ssh_host_*
	mkdir -p "$(dirname "$rootfs_tar")"
	tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -C "$root" -cf "$tmp/rootfs.tar" .
	mv "$tmp/rootfs.tar" "$rootfs_tar"
fi
# rootfs-end
files=(-file "$here/job/task.py:/opt/venv/bin/entrypoint.py" -file "$here/job/task.py:/usr/local/bin/pyflyte-execute"
	-file "$here/job/horovodrun:/usr/local/bin/horovodrun" -file "$here/job/task.py:/opt/train/train.py")
"$CLUSTER_IMAGE_BIN" -name "$image" -layer "$rootfs_tar" "${files[@]}" -workdir /home/jobuser -out "$tmp/image.tar"
"$CLUSTER_IMAGE_BIN" -name "$entrypoint_image" -layer "$rootfs_tar" "${files[@]}" -workdir /home/jobuser \
	-entrypoint python,/opt/train/train.py -out "$tmp/entrypoint.tar"
mkdir -p "$dir"
mv "$tmp/image.tar" "$tmp/entrypoint.tar" "$dir/"
log "built $image and $entrypoint_image in $((SECONDS - start))s ($(du -h "$dir/image.tar" | cut -f1) each)"
echo "JOB_IMAGE_TAR=$dir/image.tar"
echo "JOB_ENTRYPOINT_IMAGE_TAR=$dir/entrypoint.tar"

#!/usr/bin/python3
"""The task's code in make test-cluster's job image.

It stands in for Flyte's task entrypoint, which the ranks of a Flyte MPI or
Horovod job run: /opt/venv/bin/entrypoint.py, which Flyte's mpirun line
starts with `python`, and pyflyte-execute, which horovodrun starts. The image
has no flytekit, so the arguments Flyte gives (pyflyte-execute --inputs ...)
are not read. Each rank reports where it runs (its worker Pod's name, and
what that Pod's PID 1 runs), how it got there (the SSH session its orted
came in by, on mpi-operator; none under kubectl exec, on the
training-operator), and checks what the task's declared worker
command must have started: when WORKER_SERVICE=HOST:PORT is set (the task's
@task(environment=...)), an SSH server there, such as the sshd that
Worker(command=["/usr/sbin/sshd", ...]) starts. The ranks then meet: under
mpirun in an MPI allreduce (mpi4py), under horovodrun at its rendezvous.
Every rank exits 1 unless each rank ran in a worker of its own and found the
service.
"""
import json
import os
import socket
import sys
import urllib.request


def pid1():
    with open("/proc/1/cmdline", "rb") as f:
        return " ".join(w.decode(errors="replace") for w in f.read().split(b"\0") if w)


def service(address):
    """Whether an SSH server answers at address (HOST:PORT), and what it said."""
    if not address:
        return True, "none asked for"
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            banner = conn.recv(64).decode(errors="replace").strip()
    except OSError as err:
        return False, f"{address}: {err}"
    return banner.startswith("SSH-"), f"{address}: {banner}"


def report():
    ok, detail = service(os.environ.get("WORKER_SERVICE", ""))
    # How the rank got here: mpirun's orted, started in this worker by ssh
    # (mpi-operator) or kubectl exec (the training-operator), passes on the
    # environment it was started with; sshd gives its sessions SSH_CONNECTION,
    # "CLIENT_IP CLIENT_PORT SERVER_IP SERVER_PORT".
    return {"host": socket.gethostname(), "pid1": pid1(), "service": detail, "ok": ok,
            "rank": os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("HOROVOD_RANK", "")),
            "ssh": os.environ.get("SSH_CONNECTION", "")}


def verdict(reports, size):
    """The reason the ranks failed, or "" when every one ran in a worker of its own and found the service."""
    hosts = {r["host"] for r in reports}
    if len(reports) != size:
        return f"{len(reports)} of {size} ranks reported"
    if len(hosts) != size or not all("-worker-" in h for h in hosts):
        return f"the ranks ran in {sorted(hosts)}, not in {size} workers of their own"
    missing = [r["host"] for r in reports if not r["ok"]]
    if missing:
        return f"the declared worker command's service is not up in {missing}"
    return ""


def under_mpirun():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    mine = report()
    found = comm.allreduce(1 if mine["ok"] else 0, op=MPI.SUM)
    reports = comm.gather(mine, root=0)
    reason = ""
    if comm.rank == 0:
        for rank, r in enumerate(reports):
            print(f"rank {rank}: {json.dumps(r)}", flush=True)
        reason = verdict(reports, comm.size)
        print(f"allreduce: {found} of {comm.size} ranks found the service; {reason or 'ok'}", flush=True)
    reason = comm.bcast(reason, root=0)
    return 1 if reason else 0


def under_horovodrun():
    rank = os.environ["HOROVOD_RANK"]
    url = "http://{}:{}/rank/{}".format(
        os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"], os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"], rank)
    body = json.dumps(report()).encode()
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": "application/json"})
    # The rendezvous answers once every rank has reported, with every report.
    with urllib.request.urlopen(request, timeout=120) as response:
        reason = verdict(json.load(response)["reports"], int(os.environ["HOROVOD_SIZE"]))
    print(f"rank {rank}: {body.decode()}", flush=True)
    print(f"rendezvous: {reason or 'ok'}", flush=True)
    return 1 if reason else 0


if __name__ == "__main__":
    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        sys.exit(under_mpirun())
    if "HOROVOD_RANK" in os.environ:
        sys.exit(under_horovodrun())
    print("task.py: neither mpirun (OMPI_COMM_WORLD_SIZE) nor horovodrun (HOROVOD_RANK) started this", file=sys.stderr)
    sys.exit(2)

"""The cluster's side of ``submit=ray``: ``python -m launcher.ray_submit.job``.

The entrypoint of every Ray job train_multigpu submits. It takes the resolved config the job carries
(``TRAIN_MULTIGPU_RAY_CONFIG``, launcher/ray_submit/spec.py) and the job's secret values, and has the
launch run by the command-line entry, ``python -m launcher`` (a child started through run/process/),
exactly as a launch on this machine would: the CLI, finding the carried config, makes it the primary
config of a Hydra composition with no other source (so the schema checks it again, and the rest of the
launch -- checks, probe, plan, supervision, the run record -- is the session's own code), plus the
node's own overrides. This module never imports the session: a back end does not call back into the
face (tests/test_layout.py).

One node: the launch runs in a child of the entrypoint, which Ray gave the ranks' resources, in a
session of its own (a signal for the job reaches it once, passed on from here) and tied to the
entrypoint (PR_SET_PDEATHSIG); its exit code is the job's (Ray marks a non-zero exit FAILED and keeps
the code as ``driver_exit_code``).

``launcher.nnodes=N``: this process is the Ray driver. It reserves a STRICT_SPREAD placement group of
N bundles (one per node), starts one :class:`NodeLauncher` actor in each, asks node 0's actor for its
address and a free port, and has every actor run ``<python> -m launcher launcher.node_rank=R
launcher.rdzv_endpoint=ADDR:PORT`` (JAX: ``launcher.coordinator_address``) with the carried config.
The first node to fail stops the others (SIGTERM: their launchers stop their ranks and write their
records) and its exit code becomes the job's. A stop of the job (``ray job stop``, Ctrl+C of a
following train_multigpu) reaches this driver as SIGTERM and is passed to every node's launcher the
same way; a launcher whose actor dies gets SIGTERM from the kernel (PR_SET_PDEATHSIG), so nothing of
the job outlives it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from ..names import PROG
from ..run.process import procs, signals
from .spec import CONFIG_VAR, LAUNCH_MODULE, ORDER_VAR, SECRETS_VAR, node_overrides


def _say(message: str) -> None:
    print(f"[{PROG}] {message}", flush=True)


GCS_TIMEOUT_S = 30  # each request to the GCS for the secrets


class SecretsGone(Exception):
    """The job's secrets are not (or no longer) in the KV."""


def take_secrets() -> dict[str, str]:
    """The job's secret values (submit.store_secrets): read from Ray's internal KV through this job's
    GCS connection, then deleted there. ``SECRETS_VAR`` empty or unset: none (a node of a multi-node
    job gets its values from the driver)."""
    reference = os.environ.pop(SECRETS_VAR, "")
    if not reference:
        return {}
    import json

    from ray._raylet import GcsClient

    key, _, pad = reference.partition(" ")
    gcs = GcsClient(address=os.environ["RAY_ADDRESS"])  # the job supervisor sets it: the GCS's address
    data = gcs.internal_kv_get(key.encode(), None, timeout=GCS_TIMEOUT_S)
    if data is None:
        raise SecretsGone(key)
    gcs.internal_kv_del(key.encode(), False, None, timeout=GCS_TIMEOUT_S)
    return json.loads(bytes(a ^ b for a, b in zip(data, bytes.fromhex(pad))))


def launch(text: str, order: str, overrides: list[str]) -> int:
    """One train_multigpu launch here, from the carried config ``text``, the typed ``order`` of the
    script-bound values (spec.ORDER_VAR, JSON) and this node's ``overrides``: the command-line entry
    in a child, each signal this process gets passed on to it; its exit code."""
    child = None
    pending: list[int] = []  # signals that came before the child was there

    def on_signal(signum, frame):
        if child is None:
            pending.append(signum)
        elif child.poll() is None:
            procs.kill([child.pid], signum)

    env = {**os.environ, CONFIG_VAR: text, ORDER_VAR: order}
    with signals.handlers({signum: on_signal for signum in signals.FORWARDED_SIGNALS}):
        child = procs.start_tied(argv_of(overrides), env, signal.SIGTERM, own_session=True)
        for signum in pending:
            procs.kill([child.pid], signum)
        return child.wait()


def argv_of(overrides: list[str]) -> list[str]:
    """A node's launch: this interpreter's command-line entry with the node's overrides."""
    return [sys.executable, "-m", LAUNCH_MODULE, *overrides]


# -- several nodes: the driver and its actors ------------------------------------------------------


class NodeLauncher:
    """One node's train_multigpu, in a Ray actor that holds the node's bundle."""

    def __init__(self) -> None:
        self.process = None
        self.stopped = False

    def address(self) -> tuple[str, int]:
        """This node's address as Ray knows it, and a port free on it now (node 0: the rendezvous)
        whose next port, the nodes' liveness channel (launcher.node_port unset), is free too."""
        import ray

        from ..probe import free_port_pair

        host = ray.util.get_node_ip_address()
        return host, free_port_pair(host)

    def run(self, argv: list[str], env: dict[str, str]) -> int:
        if self.stopped:
            return 128 + signal.SIGTERM
        # SIGTERM when this actor dies (run/process/procs.py: PR_SET_PDEATHSIG, libc loaded before the fork)
        self.process = procs.start_tied(argv, {**os.environ, **env}, signal.SIGTERM)
        return self.process.wait()

    def stop(self, signum: int) -> None:
        self.stopped = True
        if self.process is not None and self.process.poll() is None:
            procs.kill([self.process.pid], signum)


def drive(text: str, order: str, nodes: int, cfg, hidden: dict[str, str]) -> int:
    """The driver of a multi-node job (see the module docstring)."""
    import logging

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # every node's lines, as they come (read when ray loads)
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from .spec import gpus_per_rank, nproc

    received: list[int] = []

    def on_signal(signum, frame):
        received.append(signum)

    signals.install({signum: on_signal for signum in signals.FORWARDED_SIGNALS})  # kept to the end
    ray.init(log_to_driver=True, logging_level=logging.WARNING)
    ranks = nproc(cfg)
    cpus, gpus = ranks * cfg.ray.num_cpus_per_rank, ranks * gpus_per_rank(cfg)
    bundle = {"CPU": cpus} | ({"GPU": gpus} if gpus else {})
    group = placement_group([bundle] * nodes, strategy="STRICT_SPREAD")
    _say(f"waiting for {nodes} nodes with {bundle} each (placement group, STRICT_SPREAD)")
    waited = time.monotonic()
    while not received:
        ready, _ = ray.wait([group.ready()], timeout=1.0)
        if ready:
            break
        if time.monotonic() - waited > 60:
            _say(f"still waiting for {nodes} nodes with {bundle} each: `ray status` shows what the cluster has")
            waited = time.monotonic()
    if received:
        remove_placement_group(group)
        return 128 + received[0]
    actor = ray.remote(NodeLauncher)
    actors = [
        actor.options(
            num_cpus=cpus,
            num_gpus=gpus,
            max_concurrency=4,  # stop() while run() waits
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
        ).remote()
        for rank in range(nodes)
    ]
    host, port = ray.get(actors[0].address.remote())
    rdzv_id = ray.get_runtime_context().get_job_id()
    _say(f"{nodes} nodes reserved; node 0 at {host}, port {port}")
    # every node's launcher: the carried config, and the secret values this driver took (never again from the KV)
    env = {CONFIG_VAR: text, ORDER_VAR: order, SECRETS_VAR: "", **hidden}
    runs = {
        actors[rank].run.remote(argv_of(node_overrides(cfg, rank, host, port, rdzv_id)), env): rank
        for rank in range(nodes)
    }
    codes: dict[int, int] = {}
    first_failure: int | None = None
    stopping = False
    while runs:
        done, _ = ray.wait(list(runs), num_returns=1, timeout=0.5)
        for ref in done:
            rank = runs.pop(ref)
            try:
                codes[rank] = ray.get(ref)
            except ray.exceptions.RayError as err:  # the actor died (its node was lost)
                _say(f"node {rank}: {type(err).__name__}: {str(err).splitlines()[0]}")
                codes[rank] = 1
            _say(f"node {rank} exited with code {codes[rank]}")
            if codes[rank] != 0 and first_failure is None and not received:
                first_failure = rank
        if not stopping and (received or first_failure is not None):
            stopping = True
            why = f"signal {received[0]}" if received else f"node {first_failure} failed"
            if runs:
                _say(f"stopping the other nodes ({why})")
            for other in runs.values():
                actors[other].stop.remote(signal.SIGTERM)
    remove_placement_group(group)
    if received:
        return 128 + received[0]
    if first_failure is not None:
        _say(f"job failed: node {first_failure} exited with code {codes[first_failure]}")
        return codes[first_failure]
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    text = os.environ.pop(CONFIG_VAR, None)
    order = os.environ.pop(ORDER_VAR, "[]")
    if text is None:
        print(
            f"{PROG}: error: {CONFIG_VAR} is not set: this module runs inside a Ray job (submit=ray)", file=sys.stderr
        )
        return 2
    try:
        hidden = take_secrets()
    except SecretsGone:
        print(
            f"{PROG}: error: {SECRETS_VAR}: the job's secret values are no longer in the cluster "
            "(read by an earlier start of this job): submit it again",
            file=sys.stderr,
        )
        return 2
    os.environ.update(hidden)  # where the launch finds them (launch: worker_env/profile.env), and its ranks
    if not argv:  # the entrypoint itself: one node here, or the driver of several
        from omegaconf import OmegaConf

        from ..config.schema import TrainConfig

        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), OmegaConf.create(text)))
        nodes = int(str(cfg.launcher.nnodes))
        if nodes > 1:
            return drive(text, order, nodes, cfg, hidden)
    return launch(text, order, argv)


if __name__ == "__main__":
    sys.exit(main())

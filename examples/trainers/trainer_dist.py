"""Process topology (ranks, device, back end, threads) and distributed set-up for both frameworks.

skrl reads the rank variables when ``skrl`` is first imported and, when the world is larger than one,
initialises distribution itself: the torch side hard-codes ``init_process_group("nccl")`` (unusable on
CPU), the JAX side calls ``jax.distributed.initialize``.  This trainer owns that step instead, for
both frameworks and every device:

1. initialise the process group / JAX distributed client ourselves (gloo or NCCL, gloo CPU collectives
   for JAX);
2. import skrl while the world-size variable is hidden from the environment, so skrl's config starts
   in its single-process state and initialises nothing;
3. restore the variable and write the real topology into skrl's config (its private fields; they
   have no public setters), then check skrl reports exactly what the process group says.

skrl's agents then broadcast initial parameters and all-reduce (average) gradients over the group
we created.  No torch or skrl function is patched (JAX's cache writer is wrapped on ranks above 0:
``_cache_writes_on_this_rank``).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import sys


@dataclasses.dataclass(frozen=True)
class Topology:
    framework: str  # "torch" | "jax"
    rank: int  # global rank
    local_rank: int
    world_size: int
    local_world_size: int
    device: str  # "cpu" | "cuda:N"
    backend: str  # torch process-group back end ("gloo" | "nccl"); "gloo"/"nccl" collectives for JAX
    threads: int  # intra-op threads for this process
    restart_count: int  # TORCHELASTIC_RESTART_COUNT (0 when not under torch elastic); PER NODE
    coordinator: str = ""  # JAX coordinator host:port
    # Restart attempt of the whole job, identical on every rank (see ``_agree_attempt``); before the
    # process group is set up it is this node's restart count.  -1: not yet agreed.
    attempt: int = -1
    # TRAIN_MULTIGPU_ATTEMPT: the launcher's attempt (restart.max), the same on every rank of every node
    launch_attempt: int = 0

    @property
    def restarted(self) -> bool:
        """Whether this is a restarted attempt (a failure happened on ANY node), the same on all ranks:
        torch elastic's restart (agreed) or train_multigpu's (TRAIN_MULTIGPU_ATTEMPT > 0)."""
        return (self.attempt if self.attempt >= 0 else self.restart_count) > 0 or self.launch_attempt > 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value != "" else default
    except ValueError:
        raise SystemExit(f"train.py: environment variable {name}={value!r} is not an integer") from None


def _cuda_available(framework: str) -> bool:
    """Whether a CUDA device exists, without initialising JAX (that must wait for distributed init)."""
    if framework == "torch":
        import torch

        return torch.cuda.is_available()
    # JAX: a CUDA jaxlib plugin plus a visible device; cheap checks only.
    try:
        import importlib.util

        has_plugin = (
            importlib.util.find_spec("jax_cuda12_plugin") is not None
            or importlib.util.find_spec("jax_cuda13_plugin") is not None
        )
    except (ImportError, ValueError):
        has_plugin = False
    return has_plugin and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != "" and os.path.exists("/dev/nvidia0")


def read_topology(args) -> Topology:
    """Ranks from the launcher's environment: torchrun's for torch, skrl's JAX_* for JAX."""
    if args.ml_framework == "torch":
        rank, local_rank = _int_env("RANK", 0), _int_env("LOCAL_RANK", 0)
        world = _int_env("WORLD_SIZE", 1)
        local_world = _int_env("LOCAL_WORLD_SIZE", world)
        coordinator = ""
    else:
        rank, local_rank = _int_env("JAX_RANK", 0), _int_env("JAX_LOCAL_RANK", 0)
        world = _int_env("JAX_WORLD_SIZE", 1)
        local_world = _int_env("LOCAL_WORLD_SIZE", world)  # skrl's JAX launcher gives no local size
        coordinator = (
            os.environ.get("JAX_COORDINATOR_ADDR", "127.0.0.1") + ":" + os.environ.get("JAX_COORDINATOR_PORT", "1234")
        )
    if world > 1 and not args.distributed:
        raise SystemExit(f"train.py: world size is {world} but --distributed was not given")
    if args.distributed and world == 1 and rank != 0:
        raise SystemExit("train.py: --distributed with a world size of 1 but a non-zero rank")
    if not 0 <= rank < world:
        raise SystemExit(f"train.py: rank {rank} outside world size {world}")

    device = args.device
    if device is None:
        device = f"cuda:{local_rank}" if _cuda_available(args.ml_framework) else "cpu"
    elif device == "cuda":
        device = f"cuda:{local_rank}"
    if args.distributed and world > 1 and device.startswith("cuda") and device != f"cuda:{local_rank}":
        raise SystemExit(f"train.py: distributed runs use cuda:LOCAL_RANK (cuda:{local_rank}), got --device {device}")

    backend = os.environ.get("TRAIN_MULTIGPU_DIST_BACKEND", "") or ("nccl" if device.startswith("cuda") else "gloo")
    if backend not in ("gloo", "nccl"):
        raise SystemExit(f"train.py: TRAIN_MULTIGPU_DIST_BACKEND={backend!r}; allowed: gloo, nccl")
    if backend == "nccl" and not device.startswith("cuda"):
        raise SystemExit("train.py: TRAIN_MULTIGPU_DIST_BACKEND=nccl needs a CUDA device (use gloo on cpu)")

    # Threads: an explicit OMP_NUM_THREADS wins (torchrun sets 1); otherwise share the CPUs this
    # process may run on between the local workers, so N processes on N cores never oversubscribe.
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = _int_env("OMP_NUM_THREADS", 0) or max(1, cpus // max(1, local_world))

    return Topology(
        framework=args.ml_framework,
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        local_world_size=local_world,
        device=device,
        backend=backend,
        threads=threads,
        restart_count=_int_env("TORCHELASTIC_RESTART_COUNT", 0),
        coordinator=coordinator,
        launch_attempt=_int_env("TRAIN_MULTIGPU_ATTEMPT", 0),
    )


@contextlib.contextmanager
def _hidden_env(*names: str):
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _import_skrl_passively(world_size_var: str):
    """Import skrl with the world size hidden so it initialises no distribution of its own."""
    if "skrl" in sys.modules:
        raise RuntimeError("skrl was imported before the process group was set up")
    with _hidden_env(world_size_var):
        import skrl
    skrl.logger.setLevel(logging.WARNING)  # skrl's per-rank INFO lines would break "rank 0 only" output
    return skrl


_PREFIX = "train_multigpu_example"
_STORE = None  # the TCPStore client/server this process created; released after the group is destroyed


def _agree_attempt(store, topo: Topology, deadline: float) -> tuple[int, int]:
    """A generation number that is identical on every rank and unique per restart round.

    TORCHELASTIC_RESTART_COUNT is per torch-elastic agent, i.e. per node: with c10d rendezvous a node
    whose workers were restarted because ANOTHER node's worker failed does not count a restart, so
    it cannot key anything shared.  MASTER_PORT is the agent's shared store and does not change
    between rounds either.  So the ranks agree through that store, which outlives worker restarts:

    * rank 0 takes a fresh generation ``g`` (atomic ``add``) and publishes it as ``current``;
    * every other rank reads ``current`` and claims its slot ``gen_<g>/rank_<r>`` with compare-and-set.
      If a previous worker of the same rank already claimed it, ``g`` is a dead round's: wait for
      ``current`` to change.  Having claimed it, wait until rank 0 seals ``g`` or ``current`` moves on
      (a dead round's rank 0 never seals; a sealed round had every slot claimed, so cannot be claimed);
    * rank 0 seals ``g`` once every rank claimed its slot.

    torch elastic stops all workers of a round before any worker of the next round starts, so
    nothing from a dead round can complete this exchange.  Each rank passes its own restart count
    along; the seal carries the largest, so "restarted" is also the same everywhere (it matters when
    the store is not shared and so the generation starts afresh every round).  Returns
    (generation, attempt).
    """
    import datetime
    import time

    def wait_for(key: str, seconds: float) -> bool:
        try:
            store.wait([key], datetime.timedelta(seconds=seconds))
            return True
        except Exception:  # timeout (DistStoreError / RuntimeError, depending on the torch version)
            return False

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SystemExit(
                "train.py: ranks did not agree on a restart generation in time (is another rank of this attempt stuck?)"
            )
        return left

    if topo.rank == 0:
        gen = store.add(f"{_PREFIX}/generation", 1)
        store.set(f"{_PREFIX}/current", str(gen))
        counts = [topo.restart_count]
        for r in range(1, topo.world_size):
            key = f"{_PREFIX}/gen_{gen}/rank_{r}"
            while not wait_for(key, min(5.0, remaining())):
                pass
            counts.append(int(store.get(key).decode().split(":")[1]))
        attempt = max(gen - 1, max(counts))
        store.set(f"{_PREFIX}/gen_{gen}/sealed", str(attempt))
        return gen, attempt

    import uuid

    token = f"{uuid.uuid4().hex}:{topo.restart_count}"
    while True:
        while not wait_for(f"{_PREFIX}/current", min(5.0, remaining())):
            pass
        gen = int(store.get(f"{_PREFIX}/current").decode())
        slot = f"{_PREFIX}/gen_{gen}/rank_{topo.rank}"
        claimed = store.compare_set(slot, "", token).decode() == token
        sealed = f"{_PREFIX}/gen_{gen}/sealed"
        while True:
            if claimed and wait_for(sealed, min(1.0, remaining())):
                return gen, int(store.get(sealed).decode())
            if int(store.get(f"{_PREFIX}/current").decode()) != gen:
                break  # a new round's rank 0 published its generation: take part in that one
            if not claimed:
                time.sleep(min(0.2, remaining()))


def _attempt_store(topo: Topology):
    """The torchrun store (MASTER_ADDR:MASTER_PORT), with keys scoped to this restart attempt.

    Under torch elastic the agent's store outlives a worker restart; plain ``env://`` would let the
    restarted gloo group read the dead workers' addresses ("Gloo connectFullMesh failed ...
    Connection refused").  A per-attempt prefix keeps each attempt's rendezvous keys apart; the
    attempt is agreed between the ranks (``_agree_attempt``), not taken from the per-node restart
    count.  Returns (prefixed store, agreed attempt).
    """
    import datetime
    import time

    import torch.distributed as dist

    global _STORE
    timeout = datetime.timedelta(minutes=10)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True"
    _STORE = dist.TCPStore(
        os.environ.get("MASTER_ADDR", "127.0.0.1"),
        _int_env("MASTER_PORT", 29500),
        topo.world_size,
        is_master=topo.rank == 0 and not agent_store,
        timeout=timeout,
        wait_for_workers=False,
    )
    gen, attempt = _agree_attempt(_STORE, topo, time.monotonic() + timeout.total_seconds())
    return dist.PrefixStore(f"{_PREFIX}/attempt_{gen}", _STORE), attempt


def teardown_torch(topo: Topology) -> None:
    """Leave the process group in step: barrier, destroy the group, then release our TCPStore.

    Destroying the group while a peer still has gloo traffic in flight, or leaving the group and the
    store to interpreter-exit destructors (with gloo's threads still running), can abort the process
    ("terminate called without an active exception") after the run has finished.
    """
    global _STORE
    import torch.distributed as dist

    if topo.distributed and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
    _STORE = None
    import gc

    gc.collect()


def setup_torch(topo: Topology) -> Topology:
    """Process group first (gloo/NCCL), then skrl adopting it.

    Returns the topology with ``attempt`` agreed between the ranks (skrl.config.torch is configured)."""
    import torch

    torch.set_num_threads(topo.threads)
    if topo.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(topo.device))
    if topo.distributed:
        import torch.distributed as dist

        store, attempt = _attempt_store(topo)
        topo = dataclasses.replace(topo, attempt=attempt)
        dist.init_process_group(backend=topo.backend, store=store, rank=topo.rank, world_size=topo.world_size)
    else:
        topo = dataclasses.replace(topo, attempt=topo.restart_count)
    skrl = _import_skrl_passively("WORLD_SIZE")
    cfg = skrl.config.torch
    cfg._rank, cfg._local_rank, cfg._world_size = topo.rank, topo.local_rank, topo.world_size
    cfg._is_distributed = topo.distributed
    cfg.device = topo.device
    if topo.distributed:
        import torch.distributed as dist

        assert cfg.is_distributed and cfg.world_size == dist.get_world_size() and cfg.rank == dist.get_rank()
        assert dist.get_backend() == topo.backend
    return topo


JAX_CACHE_VAR = "JAX_COMPILATION_CACHE_DIR"


def _cache_writes_on_this_rank() -> None:
    """Let this process (JAX process index above 0) write JAX's persistent compilation cache.

    JAX writes the cache from process 0 only (``jax._src.compiler._cache_write``), and a program's
    cache key names the devices it runs on: every other rank's programs (its rollout step, on its
    own device) were never in the cache, so after a restart every rank but the first compiled them
    again (docs/recovery.md). Each rank above 0 keeps its own folder of the cache (``rank<R>`` in
    the one the launcher or the user named: one writer per folder, so two ranks never write the same
    entry at once) and writes it the way process 0 does: JAX's own ``_cache_write``, told it is
    process 0 for the call. Where a JAX version has no such function, nothing changes.
    """
    try:
        from jax._src import compiler, distributed
    except ImportError:
        return
    write = getattr(compiler, "_cache_write", None)
    if write is None or getattr(write, "every_rank", False):
        return

    def cache_write(*args, **kwargs):
        state = distributed.global_state
        saved, state.process_id = state.process_id, 0
        try:
            return write(*args, **kwargs)
        finally:
            state.process_id = saved

    cache_write.every_rank = True
    compiler._cache_write = cache_write


_FAILED_CODE: int | None = None  # this rank's training failed: the exit code it leaves with


def failed(code: int = 1) -> None:
    """Note that this rank's training failed (train.py's ``main``, as the error leaves it)."""
    global _FAILED_CODE
    _FAILED_CODE = code


def _leave_failed_jax() -> None:
    """At interpreter exit, after a failure: leave without JAX's own exit handler.

    JAX's handler (``jax._src.api.clean_up``, registered when jax is imported) clears the backend and
    shuts the distributed client down, which waits for every other process: after a peer died (the
    usual reason for a collective to fail) it waits for that peer (for minutes), until the launcher's
    SIGKILL one second later (docs/recovery.md). Registered after ``jax.distributed.initialize``, so
    it runs before JAX's handler and after every handler registered later (the trackers'); the rank's
    output is flushed first. A rank that did not fail exits as before.
    """
    if _FAILED_CODE is None:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(_FAILED_CODE)


def setup_jax(topo: Topology):
    """JAX distributed client first (gloo CPU collectives), then skrl adopting it. Returns skrl.config.jax."""
    if topo.device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        if topo.threads == 1:
            flags = os.environ.get("XLA_FLAGS", "")
            os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
    own_cache = topo.distributed and topo.rank > 0 and bool(os.environ.get(JAX_CACHE_VAR))
    if own_cache:  # this rank's own folder of the cache (JAX reads the variable when it is imported)
        os.environ[JAX_CACHE_VAR] = os.path.join(os.environ[JAX_CACHE_VAR], f"rank{topo.rank}")
    import jax

    if own_cache:
        _cache_writes_on_this_rank()
    if topo.device == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if topo.distributed:
        jax.distributed.initialize(
            coordinator_address=topo.coordinator,
            num_processes=topo.world_size,
            process_id=topo.rank,
            local_device_ids=[topo.local_rank] if topo.device.startswith("cuda") else None,
        )
        atexit.register(_leave_failed_jax)
    skrl = _import_skrl_passively("JAX_WORLD_SIZE")
    cfg = skrl.config.jax
    cfg._rank, cfg._local_rank, cfg._world_size = topo.rank, topo.local_rank, topo.world_size
    cfg._is_distributed = topo.distributed
    cfg._coordinator_address = topo.coordinator or cfg._coordinator_address
    if topo.distributed:
        cfg.device = jax.local_devices()[0]
        assert cfg.is_distributed and jax.process_count() == topo.world_size and jax.process_index() == topo.rank
    else:
        cfg.device = jax.devices("gpu" if topo.device.startswith("cuda") else "cpu")[
            int(topo.device.split(":")[1]) if ":" in topo.device else 0
        ]
    return cfg

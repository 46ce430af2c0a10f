"""The framework-neutral training loop: iterations, per-iteration output, checkpoints, signals,
resume, fault injection and the final evaluation.

One iteration = ``rollouts`` environment steps on every worker followed by skrl's PPO update
(whose gradients skrl all-reduces), then one small all-gather that carries the episode returns and
any stop request, so that all ranks stop at the same iteration boundary.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

import trainer_outputs as out
import trainer_trackers
from trainer_env import EpisodeTracker, env_seeds, evaluate, make_vec_env
from trainer_ppo import for_framework, pop_stats

CHECKPOINT_FORMAT = 1
RETURN_WINDOW = 10  # finished episodes per worker averaged into "mean_return"
HEARTBEAT_VAR = "TRAIN_MULTIGPU_HEARTBEAT_FILE"  # exported to every rank by train_multigpu
BEAT_WIDTH = 32  # a beat's record, padded with spaces: a shorter one overwrites a longer one whole


class StopRequest:
    """SIGTERM / SIGUSR1: finish the current iteration, checkpoint, exit 128 + signal number."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self) -> None:
        self.signum = 0
        for s in self.SIGNALS:
            signal.signal(s, self._handle)

    def _handle(self, signum, _frame) -> None:
        if not self.signum:
            self.signum = signum


_beat_fd: int | None = None


def beat(iteration: int, total: int) -> None:
    """A heartbeat for train_multigpu's hang watchdog (docs/hangs.md): the iteration and the total in
    the file the launcher names; nothing when run without it. One pwrite(2) of a fixed-width record
    on a file kept open: a truncating rewrite (open "w") costs milliseconds on ext4, which flushes a
    file replaced by truncation (auto_da_alloc)."""
    global _beat_fd
    path = os.environ.get(HEARTBEAT_VAR)
    if not path:
        return
    try:
        if _beat_fd is None:
            _beat_fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(_beat_fd, f"{iteration} {total}".encode().ljust(BEAT_WIDTH), 0)
    except OSError:
        pass


@dataclass(frozen=True)
class Crash:
    """TRAIN_MULTIGPU_EXAMPLE_CRASH="<iteration>:<global rank>[:hang][:always]": that rank exits 3
    right after that iteration (0: before the first, once start-up is over); ``hang``: it sleeps
    instead, beating no more (a stalled rank); ``always``: on restarted attempts too (by default only
    the first attempt fires: TORCHELASTIC_RESTART_COUNT and TRAIN_MULTIGPU_ATTEMPT both 0 or unset)."""

    iteration: int
    rank: int
    hang: bool = False
    always: bool = False

    def fires(self, iteration: int, rank: int, restarted: bool) -> bool:
        return (iteration, rank) == (self.iteration, self.rank) and (self.always or not restarted)


def parse_crash(spec: str) -> Crash | None:
    """The fault injection TRAIN_MULTIGPU_EXAMPLE_CRASH asks for (None: none).

    >>> parse_crash("2:1"), parse_crash("0:0:always").always, parse_crash("3:1:hang").hang
    (Crash(iteration=2, rank=1, hang=False, always=False), True, True)
    """
    if not spec:
        return None
    words = spec.split(":")
    try:
        iteration, rank = int(words[0]), int(words[1])
        if not set(words[2:]) <= {"hang", "always"}:
            raise ValueError
    except (ValueError, IndexError):
        raise SystemExit(
            f"train.py: TRAIN_MULTIGPU_EXAMPLE_CRASH={spec!r}; expected <iteration>:<global rank>[:hang][:always]"
        ) from None
    return Crash(iteration, rank, "hang" in words[2:], "always" in words[2:])


def parse_crashes(spec: str) -> tuple[Crash, ...]:
    """TRAIN_MULTIGPU_EXAMPLE_CRASH: one fault, or several separated by commas (each fires on its own
    terms: "2:1:always,3:1:always" fails after iteration 2, and an attempt resumed from it after 3).

    >>> [c.iteration for c in parse_crashes("2:1:always,3:1:always")], parse_crashes("")
    ([2, 3], ())
    """
    return tuple(crash for part in spec.split(",") if (crash := parse_crash(part.strip())) is not None)


def crash_now(crashes: tuple[Crash, ...], iteration: int, topo) -> None:
    """Exit 3 (or stall) when a fault injection fires here."""
    crash = next((c for c in crashes if c.fires(iteration, topo.rank, topo.restarted)), None)
    if crash is None:
        return
    where = f"after iteration {iteration}" if iteration else "before its first iteration"
    what = "stalls" if crash.hang else "exits 3"
    print(f"train.py: TRAIN_MULTIGPU_EXAMPLE_CRASH: rank {topo.rank} {what} {where}", file=sys.stderr, flush=True)
    if crash.hang:
        while True:
            time.sleep(1000)
    os._exit(3)


class Dump:
    """TRAIN_MULTIGPU_EXAMPLE_DUMP_PARAMS=<dir>: every rank writes its policy parameters and seeds (tests)."""

    def __init__(self, directory: str, rank: int) -> None:
        self.dir = Path(directory) if directory else None
        self.rank = rank
        self.info: dict = {"rank": rank}
        if self.dir:
            self.dir.mkdir(parents=True, exist_ok=True)

    def params(self, tag: str, vector: np.ndarray) -> None:
        if self.dir:
            np.save(self.dir / f"rank{self.rank}_{tag}.npy", vector)

    def write_info(self, **values) -> None:
        if self.dir:
            self.info.update(values)
            out.atomic_write(self.dir / f"rank{self.rank}_info.json", json.dumps(self.info, default=float).encode())


class Backend(Protocol):
    """What the loop needs from a framework (trainer_torch.TorchBackend, trainer_jax.JaxBackend)."""

    name: str  # "torch" or "jax": written into checkpoints, checked on resume
    rollouts: int  # environment steps per iteration (skrl's PPO rollouts)
    agent: Any  # the skrl PPO agent (its tracking data gives the loss statistics)

    # interaction: one action per step, the transition recorded, skrl's update after the last step
    def act(self, obs: np.ndarray, timestep: int, timesteps: int) -> np.ndarray: ...
    def record(self, rewards, next_obs, terminated, truncated, timestep: int, timesteps: int) -> None: ...
    def post_interaction(self, timestep: int, timesteps: int) -> None: ...
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray: ...
    def set_learning_rate(self, lr: float) -> None: ...
    # state: checkpoints are bytes rank 0 writes and every rank loads
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...
    def dumps(self, obj) -> bytes: ...
    def loads(self, data: bytes): ...
    def policy_vector(self) -> np.ndarray: ...
    def optimizer_steps(self) -> int: ...
    # collectives across the ranks
    def allgather_floats(self, values: list[float]) -> np.ndarray: ...
    def broadcast_bytes(self, data: bytes | None) -> bytes | None: ...
    def close(self) -> None: ...


def say(topo, *parts) -> None:
    if topo.is_main:
        print(*parts, flush=True)


# the other ranks' lines (their own log, logs/rank<R>.log; the console shows rank 0 only by default):
# their start, one line every this many iterations, and their end
NOTE_EVERY = 10


def note(topo, *parts) -> None:
    """A line of a rank other than 0, led by its rank (rank 0 speaks through :func:`say`)."""
    if not topo.is_main:
        print(f"rank {topo.rank}:", *parts, flush=True)


@dataclass
class Training:
    """What the three phases share: settings from the command line and hyperparameters, the
    environment and back end, and the progress so far."""

    args: Any
    topo: Any
    hp: dict
    env: Any
    backend: Backend
    seed: int
    rank_seed: int
    num_envs: int
    max_iterations: int
    dump: Dump
    crash: tuple[Crash, ...] = ()  # TRAIN_MULTIGPU_EXAMPLE_CRASH
    run_dir: Path | None = None  # rank 0 only
    scalars: trainer_trackers.Logged | None = None  # rank 0 only (TensorBoard and the trackers)
    start_iteration: int = 0
    iteration: int = 0
    env_steps: int = 0
    history: list = field(default_factory=list)
    checkpoint_world: int | None = None  # the world size of the checkpoint resumed from
    stopped_by: int = 0  # the signal that stopped training (on any rank), 0: none
    train_s: float = 0.0

    @property
    def task(self) -> str:
        return self.args.task


def run(*, args, topo, hp: dict, backend_factory: Callable[..., Backend]) -> int:
    """Train; returns the process exit code."""
    hp = for_framework(hp, args.ml_framework)
    seed = args.seed if args.seed is not None else int(hp.get("seed", 42))
    rank_seed = seed + topo.rank
    num_envs = args.num_envs or int(hp["num_envs"])
    schedule = hp.get("learning_rate_schedule", "constant")
    if schedule not in ("constant", "linear"):
        raise SystemExit(f"train.py: learning_rate_schedule={schedule!r}; allowed: constant, linear")
    random.seed(rank_seed)
    np.random.seed(rank_seed % 2**32)

    env = make_vec_env(args.task, num_envs)
    backend = backend_factory(
        topo=topo,
        observation_space=env.single_observation_space,
        action_space=env.single_action_space,
        num_envs=num_envs,
        agent_cfg=dict(hp.get("agent", {})),
        model_cfg=dict(hp.get("models", {})),
        rank_seed=rank_seed,
    )
    # start-up is over: its objects (the modules of torch or JAX and skrl, hundreds of thousands, all
    # kept to the end) leave the collector's sight, so that no later collection -- the teardown's, the
    # interpreter's at exit -- walks them again (a second of CPU per rank); the collector is back on for
    # what training allocates (examples/train.py turned it off for the start-up)
    gc.freeze()
    gc.enable()
    training = Training(
        args=args,
        topo=topo,
        hp=hp,
        env=env,
        backend=backend,
        seed=seed,
        rank_seed=rank_seed,
        num_envs=num_envs,
        max_iterations=args.max_iterations or int(hp["max_iterations"]),
        crash=parse_crashes(os.environ.get("TRAIN_MULTIGPU_EXAMPLE_CRASH", "")),
        dump=Dump(os.environ.get("TRAIN_MULTIGPU_EXAMPLE_DUMP_PARAMS", ""), topo.rank),
    )
    code = restore(training)
    if code:
        backend.close()
        return code
    iterate(training)
    return finish(training)


def world_change(state: dict, world_size: int, num_envs: int) -> str:
    """The line that says a checkpoint was written at another world size ("" when the same): an
    elastic launch (``launcher.nnodes=MIN:MAX``) that lost or regained a node resumes at another
    size. The trainer keeps the per-worker env count (``--num_envs`` is per worker, as in Isaac
    Lab): the total env count, and the env steps of an iteration, follow the world size. The
    checkpoint (the policy, the optimizer, the iteration, the env steps so far) is the same on every
    rank, so any world size can load it (docs/recovery.md, "Elastic nodes").

    >>> world_change({"world_size": 4, "num_envs_per_worker": 8}, 2, 8)
    'world size 4 -> 2 since the checkpoint: 8 envs per worker as before, 16 in all (was 32)'
    >>> world_change({"world_size": 2, "num_envs_per_worker": 8}, 2, 8), world_change({}, 2, 8)
    ('', '')
    """
    before = state.get("world_size")
    if before is None or int(before) == world_size:
        return ""
    envs_before = int(state.get("num_envs_per_worker", num_envs))
    same = "as before" if envs_before == num_envs else f"(was {envs_before})"
    return (
        f"world size {before} -> {world_size} since the checkpoint: {num_envs} envs per worker {same}, "
        f"{world_size * num_envs} in all (was {int(before) * envs_before})"
    )


def restore(t: Training) -> int:
    """Choose the run directory and the starting point (rank 0 decides, everyone loads the same
    bytes); returns an exit code to stop with, 0 to go on."""
    topo, backend = t.topo, t.backend
    payload = None
    if topo.is_main:
        t.run_dir = out.resolve_run_dir(t.task, t.args.run_name, resume=t.args.resume, restarted=topo.restarted)
        found = None
        if t.args.checkpoint:
            found = Path(t.args.checkpoint), Path(t.args.checkpoint).read_bytes()  # a regular file (trainer_args)
            if not found[1]:
                print(f"train.py: --checkpoint {t.args.checkpoint}: the file is empty (0 bytes)", file=sys.stderr)
                found, payload = None, b""  # tells every rank to stop
        elif t.args.resume or topo.restarted:  # restarted: a failure on any node, agreed by all ranks
            found = out.usable_checkpoint(t.run_dir, lambda line: print(line, file=sys.stderr, flush=True))
            if found is None and t.args.resume:
                print(f"train.py: --resume: no usable checkpoint in {t.run_dir / out.CHECKPOINT_DIR}", file=sys.stderr)
                payload = b""  # tells every rank to stop
        if found is not None:
            source, payload = found
            print(f"resuming from {source}", flush=True)
    payload = backend.broadcast_bytes(payload)
    if payload == b"":
        return 2
    if payload is not None:
        state = backend.loads(payload)
        if state.get("format") != CHECKPOINT_FORMAT or state.get("framework") != backend.name:
            if topo.is_main:
                print(f"train.py: checkpoint is not a {backend.name} checkpoint of this trainer", file=sys.stderr)
            return 2
        backend.load_state_dict(state["agent"])
        t.start_iteration, t.env_steps = int(state["iteration"]), int(state["env_steps"])
        t.history = [tuple(h) for h in state.get("history", [])]
        t.checkpoint_world = state.get("world_size")
        if topo.is_main:  # the iterations past the checkpoint are done again: their rows go
            out.trim_metrics(t.run_dir, t.start_iteration)
        changed = world_change(state, topo.world_size, t.num_envs)
        if changed:
            say(topo, changed)
    t.iteration = t.start_iteration

    if topo.is_main:
        resolved = {
            "task": t.task,
            "ml_framework": backend.name,
            "seed": t.seed,
            "num_envs_per_worker": t.num_envs,
            "max_iterations": t.max_iterations,
            "world_size": topo.world_size,
            "device": topo.device,
            "dist_backend": topo.backend if topo.distributed else None,
            "threads_per_worker": topo.threads,
            # XLA's instruction-set cap and other flags change a JAX run's arithmetic (docs/example_trainers.md)
            **({"xla_flags": os.environ.get("XLA_FLAGS")} if backend.name == "jax" else {}),
            "start_iteration": t.start_iteration,
            "checkpoint_world_size": t.checkpoint_world,  # another than world_size: an elastic launch's
            "argv": sys.argv[1:],
            "hyperparameters": t.hp,
        }
        out.write_run_info(t.run_dir, resolved)
        t.scalars = trainer_trackers.Logged(out.Scalars(t.run_dir), resolved)  # and tracker=wandb/mlflow
        say(
            topo,
            f"{t.task} | {backend.name} | {topo.world_size} worker(s) x {t.num_envs} envs | device {topo.device}"
            f" | {topo.threads} thread(s)/worker | iterations {t.start_iteration + 1}..{t.max_iterations}"
            f" | run dir {t.run_dir}",
        )
    note(
        topo,
        f"{t.task} | {backend.name} | worker {topo.rank} of {topo.world_size} x {t.num_envs} envs"
        f" | device {topo.device} | iterations {t.start_iteration + 1}..{t.max_iterations}",
    )
    return 0


def iterate(t: Training) -> None:
    """The training iterations, from the starting point to max_iterations or a stop request."""
    topo, backend, env = t.topo, t.backend, t.env
    rollouts = backend.rollouts
    base_lr = float(t.hp.get("agent", {}).get("learning_rate", 1e-3))
    schedule = t.hp.get("learning_rate_schedule", "constant")
    reward_scale = float(t.hp.get("reward_scale", 1.0))
    crash = t.crash

    seeds = env_seeds(t.rank_seed, t.num_envs, stream=t.start_iteration)
    obs, _ = env.reset(seed=seeds)
    t.dump.params("initial", backend.policy_vector())
    t.dump.write_info(
        rank_seed=t.rank_seed,
        env_seeds=seeds,
        first_obs=np.asarray(obs).tolist(),
        start_iteration=t.start_iteration,
        optimizer_steps_start=backend.optimizer_steps(),
        # start-up ran no full collection; its objects are frozen (see run)
        startup_full_collections=gc.get_stats()[2]["collections"],
        frozen_objects=gc.get_freeze_count(),
    )

    stop = StopRequest()
    tracker = EpisodeTracker(t.num_envs)
    window: collections.deque = collections.deque(maxlen=RETURN_WINDOW)
    progress = out.Progress()  # the per-iteration line; rewritten in place on a terminal
    eta = out.Eta(t.max_iterations, t.start_iteration)  # none while compilation (iteration 1) dominates
    timesteps = t.max_iterations * rollouts
    steps_per_iteration = topo.world_size * t.num_envs * rollouts
    t_start = time.perf_counter()
    beat(t.start_iteration, t.max_iterations)  # start-up is over
    if t.start_iteration == 0:
        crash_now(crash, 0, topo)
    for iteration in range(t.start_iteration + 1, t.max_iterations + 1):
        t.iteration = iteration
        t0 = time.perf_counter()
        if schedule == "linear":  # anneal to 0 at max_iterations; a function of the iteration, so resume-safe
            backend.set_learning_rate(base_lr * (1.0 - (iteration - 1) / t.max_iterations))
        for step in range(rollouts):
            timestep = (iteration - 1) * rollouts + step
            actions = backend.act(obs, timestep, timesteps)
            next_obs, rewards, terminated, truncated, _ = env.step(actions)
            backend.record(rewards * reward_scale, next_obs, terminated, truncated, timestep, timesteps)
            tracker.step(rewards, terminated | truncated)
            if step == rollouts - 1:
                t_update = time.perf_counter()
            backend.post_interaction(timestep, timesteps)  # PPO update after the last step
            obs = next_obs
        t_sync = time.perf_counter()
        update_s = t_sync - t_update
        window.extend(tracker.pop())
        # one collective per iteration: [stop signal, sum of windowed returns, their count]
        table = backend.allgather_floats([float(stop.signum), float(sum(window)), float(len(window))])
        sync_s = time.perf_counter() - t_sync
        t.stopped_by = int(table[:, 0].max())
        mean_return = float(table[:, 1].sum() / table[:, 2].sum()) if table[:, 2].sum() else float("nan")
        t.env_steps += steps_per_iteration
        t.history.append((t.env_steps, mean_return))
        stats = pop_stats(backend.agent)
        checkpoint_s = 0.0
        interval = t.args.checkpoint_interval  # >= 1 (trainer_args)
        if topo.is_main and (iteration % interval == 0 or iteration == t.max_iterations or t.stopped_by):
            payload = {
                "format": CHECKPOINT_FORMAT,
                "framework": backend.name,
                "task": t.task,
                "iteration": iteration,
                "env_steps": t.env_steps,
                "history": t.history,
                "seed": t.seed,
                "world_size": topo.world_size,
                "num_envs_per_worker": t.num_envs,
                "agent": backend.state_dict(),
                "rng": {"numpy": np.random.get_state(), "python": random.getstate()},
            }
            t_checkpoint = time.perf_counter()
            out.save_checkpoint(t.run_dir, iteration, backend.dumps(payload))
            checkpoint_s = time.perf_counter() - t_checkpoint
        dt = time.perf_counter() - t0
        if topo.is_main:
            t.scalars.add(
                t.env_steps,
                {
                    "Reward/mean_return": mean_return,
                    "Perf/env_steps_per_s": steps_per_iteration / dt,
                    "Perf/iteration_s": dt,
                    "Perf/update_s": update_s,
                    **stats,
                },
            )
            out.append_metrics(
                t.run_dir,
                iteration,
                t.env_steps,
                steps_per_iteration / dt,
                mean_return,
                dt,
                update_s,
                t_update - t0,
                sync_s,
                checkpoint_s,
            )
            progress.show(
                out.progress_line(
                    iteration,
                    t.max_iterations,
                    steps_per_iteration / dt,
                    mean_return,
                    t.env_steps,
                    eta.update(iteration, time.perf_counter()),
                )
            )
        beat(iteration, t.max_iterations)  # done (checkpointed): the launcher's "iteration N done" agrees
        if iteration % NOTE_EVERY == 0:
            note(topo, f"iteration {iteration}/{t.max_iterations}, mean return {mean_return:.1f}")
        crash_now(crash, iteration, topo)
        if t.stopped_by:
            break
    progress.end()
    t.train_s = time.perf_counter() - t_start


def finish(t: Training) -> int:
    """The learning curve, the final evaluation (or the stop message); returns the exit code."""
    topo, backend = t.topo, t.backend
    t.dump.params("final", backend.policy_vector())
    t.dump.write_info(final_iteration=t.iteration, optimizer_steps_end=backend.optimizer_steps())
    if topo.is_main:
        t.scalars.close()
        if t.stopped_by:
            # said before the plot (matplotlib's import takes seconds on a loaded node): a scheduler's
            # SIGKILL after its grace (SLURM's KillWait) must not lose the line that names the checkpoint
            name = signal.Signals(t.stopped_by).name
            say(
                topo,
                f"stopped by {name} after iteration {t.iteration}; checkpoint "
                f"{out.checkpoint_path(t.run_dir, t.iteration)}; resume with --resume",
            )
        plot = out.plot_learning_curve(t.run_dir, t.history, t.task)
        if t.stopped_by:
            t.scalars.finish()
        else:
            episodes = int(t.hp.get("eval_episodes", 5))
            returns = evaluate(t.task, backend.act_deterministic, episodes, t.seed)
            mean_eval = float(np.mean(returns))
            out.atomic_write(
                t.run_dir / "evaluation.json",
                json.dumps(
                    {
                        "mean_return": mean_eval,
                        "returns": returns,
                        "iterations": t.iteration,
                        "env_steps": t.env_steps,
                        "train_seconds": t.train_s,
                    }
                ).encode(),
            )
            scalars_final = out.Scalars(t.run_dir)
            scalars_final.add(t.env_steps, {"Eval/mean_return": mean_eval})
            scalars_final.close()
            say(
                topo,
                f"done: {t.iteration} iterations, {t.env_steps} env steps, {t.train_s:.1f} s training; plot {plot}",
            )
            say(topo, f"evaluation: mean_return={mean_eval:.1f} over {episodes} episodes (deterministic policy)")
            t.scalars.finish({"Eval/mean_return": mean_eval})
        say(topo, f"run_dir: {t.run_dir}")
    if t.stopped_by:
        note(topo, f"stopped by {signal.Signals(t.stopped_by).name} after iteration {t.iteration}")
    else:
        note(topo, f"done: {t.iteration} iterations")
    t.env.close()
    backend.close()
    return 128 + t.stopped_by if t.stopped_by else 0

"""The framework-neutral training loop: iterations, per-iteration output, checkpoints, signals,
resume, fault injection and the final evaluation.

One iteration = ``rollouts`` environment steps on every worker followed by skrl's PPO update
(whose gradients skrl all-reduces), then one small all-gather that carries the episode returns and
any stop request, so that all ranks stop at the same iteration boundary.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np

import trainer_outputs as out
from trainer_env import EpisodeTracker, env_seeds, evaluate, make_vec_env

CHECKPOINT_FORMAT = 1
RETURN_WINDOW = 10  # finished episodes per worker averaged into "mean_return"


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


def parse_crash(spec: str) -> tuple[int, int] | None:
    """TRAIN_MULTIGPU_EXAMPLE_CRASH="<iteration>:<global rank>" (iterations count from 1)."""
    if not spec:
        return None
    try:
        iteration, rank = (int(x) for x in spec.split(":"))
    except ValueError:
        raise SystemExit(f"train.py: TRAIN_MULTIGPU_EXAMPLE_CRASH={spec!r}; expected <iteration>:<global rank>") from None
    return iteration, rank


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


def say(topo, *parts) -> None:
    if topo.is_main:
        print(*parts, flush=True)


def run(*, args, topo, hp: dict, backend_factory) -> int:
    """Train; returns the process exit code."""
    task = args.task
    seed = args.seed if args.seed is not None else int(hp.get("seed", 42))
    rank_seed = seed + topo.rank
    num_envs = args.num_envs or int(hp["num_envs"])
    max_iterations = args.max_iterations or int(hp["max_iterations"])
    reward_scale = float(hp.get("reward_scale", 1.0))
    base_lr = float(hp.get("agent", {}).get("learning_rate", 1e-3))
    schedule = hp.get("learning_rate_schedule", "constant")
    if schedule not in ("constant", "linear"):
        raise SystemExit(f"train.py: learning_rate_schedule={schedule!r}; allowed: constant, linear")
    random.seed(rank_seed)
    np.random.seed(rank_seed % 2**32)

    env = make_vec_env(task, num_envs)
    backend = backend_factory(topo=topo, observation_space=env.single_observation_space,
                              action_space=env.single_action_space, num_envs=num_envs,
                              agent_cfg=dict(hp.get("agent", {})), model_cfg=dict(hp.get("models", {})),
                              rank_seed=rank_seed)
    rollouts = backend.rollouts
    crash = parse_crash(os.environ.get("TRAIN_MULTIGPU_EXAMPLE_CRASH", ""))
    dump = Dump(os.environ.get("TRAIN_MULTIGPU_EXAMPLE_DUMP_PARAMS", ""), topo.rank)

    # ---- run directory and starting point (rank 0 decides, everyone loads the same bytes) ------
    run_dir = None
    payload = None
    if topo.is_main:
        run_dir = out.resolve_run_dir(task, args.run_name, resume=args.resume, restarted=topo.restarted)
        source = None
        if args.checkpoint:
            source = Path(args.checkpoint)
        elif args.resume or topo.restarted:  # restarted: a failure on any node, agreed by all ranks
            source = out.latest_checkpoint(run_dir)
            if source is None and args.resume:
                print(f"train.py: --resume: no checkpoint in {run_dir / out.CHECKPOINT_DIR}", file=sys.stderr)
                payload = b""  # tells every rank to stop
        if source is not None:
            payload = source.read_bytes()
            print(f"resuming from {source}", flush=True)
    payload = backend.broadcast_bytes(payload)
    if payload == b"":
        backend.close()
        return 2
    start_iteration, env_steps, history = 0, 0, []
    if payload is not None:
        state = backend.loads(payload)
        if state.get("format") != CHECKPOINT_FORMAT or state.get("framework") != backend.name:
            if topo.is_main:
                print(f"train.py: checkpoint is not a {backend.name} checkpoint of this trainer", file=sys.stderr)
            backend.close()
            return 2
        backend.load_state_dict(state["agent"])
        start_iteration, env_steps = int(state["iteration"]), int(state["env_steps"])
        history = [tuple(h) for h in state.get("history", [])]

    if topo.is_main:
        resolved = {"task": task, "ml_framework": backend.name, "seed": seed, "num_envs_per_worker": num_envs,
                    "max_iterations": max_iterations, "world_size": topo.world_size, "device": topo.device,
                    "dist_backend": topo.backend if topo.distributed else None, "threads_per_worker": topo.threads,
                    "start_iteration": start_iteration, "argv": sys.argv[1:], "hyperparameters": hp}
        out.write_run_info(run_dir, resolved)
        scalars = out.Scalars(run_dir)
        say(topo, f"{task} | {backend.name} | {topo.world_size} worker(s) x {num_envs} envs | device {topo.device}"
                  f" | {topo.threads} thread(s)/worker | iterations {start_iteration + 1}..{max_iterations}"
                  f" | run dir {run_dir}")

    seeds = env_seeds(rank_seed, num_envs, stream=start_iteration)
    obs, _ = env.reset(seed=seeds)
    dump.params("initial", backend.policy_vector())
    dump.write_info(rank_seed=rank_seed, env_seeds=seeds, first_obs=np.asarray(obs).tolist(),
                    start_iteration=start_iteration, optimizer_steps_start=backend.optimizer_steps())

    stop = StopRequest()
    tracker = EpisodeTracker(num_envs)
    window: collections.deque = collections.deque(maxlen=RETURN_WINDOW)
    timesteps = max_iterations * rollouts
    steps_per_iteration = topo.world_size * num_envs * rollouts
    t_start = time.perf_counter()
    stopped_by = 0
    iteration = start_iteration
    for iteration in range(start_iteration + 1, max_iterations + 1):
        t0 = time.perf_counter()
        if schedule == "linear":  # anneal to 0 at max_iterations; a function of the iteration, so resume-safe
            backend.set_learning_rate(base_lr * (1.0 - (iteration - 1) / max_iterations))
        for t in range(rollouts):
            timestep = (iteration - 1) * rollouts + t
            actions = backend.act(obs, timestep, timesteps)
            next_obs, rewards, terminated, truncated, _ = env.step(actions)
            backend.record(rewards * reward_scale, next_obs, terminated, truncated, timestep, timesteps)
            tracker.step(rewards, terminated | truncated)
            if t == rollouts - 1:
                t_update = time.perf_counter()
            backend.post_interaction(timestep, timesteps)  # PPO update after the last step
            obs = next_obs
        t_sync = time.perf_counter()
        update_s = t_sync - t_update
        window.extend(tracker.pop())
        # one collective per iteration: [stop signal, sum of windowed returns, their count]
        table = backend.allgather_floats([float(stop.signum), float(sum(window)), float(len(window))])
        sync_s = time.perf_counter() - t_sync
        stopped_by = int(table[:, 0].max())
        mean_return = float(table[:, 1].sum() / table[:, 2].sum()) if table[:, 2].sum() else float("nan")
        env_steps += steps_per_iteration
        history.append((env_steps, mean_return))
        stats = backend.pop_stats()
        if topo.is_main:
            payload = {"format": CHECKPOINT_FORMAT, "framework": backend.name, "task": task,
                       "iteration": iteration, "env_steps": env_steps, "history": history,
                       "seed": seed, "world_size": topo.world_size, "num_envs_per_worker": num_envs,
                       "agent": backend.state_dict(),
                       "rng": {"numpy": np.random.get_state(), "python": random.getstate()}}
            t_checkpoint = time.perf_counter()
            out.save_checkpoint(run_dir, iteration, backend.dumps(payload))
            checkpoint_s = time.perf_counter() - t_checkpoint
        dt = time.perf_counter() - t0
        if topo.is_main:
            scalars.add(env_steps, {"Reward/mean_return": mean_return, "Perf/env_steps_per_s": steps_per_iteration / dt,
                                    "Perf/iteration_s": dt, "Perf/update_s": update_s, **stats})
            out.append_metrics(run_dir, iteration, env_steps, steps_per_iteration / dt, mean_return, dt, update_s,
                               t_update - t0, sync_s, checkpoint_s)
            ret = f"{mean_return:7.1f}" if mean_return == mean_return else "    n/a"
            say(topo, f"[iter {iteration:4d}/{max_iterations}] env_steps/s={steps_per_iteration / dt:8.0f} "
                      f"mean_return={ret} env_steps={env_steps}")
        if crash and crash == (iteration, topo.rank) and not topo.restarted:
            print(f"train.py: TRAIN_MULTIGPU_EXAMPLE_CRASH: rank {topo.rank} exits 3 after iteration {iteration}",
                  file=sys.stderr, flush=True)
            os._exit(3)
        if stopped_by:
            break
    train_s = time.perf_counter() - t_start

    dump.params("final", backend.policy_vector())
    dump.write_info(final_iteration=iteration, optimizer_steps_end=backend.optimizer_steps())
    code = 0
    if topo.is_main:
        scalars.close()
        plot = out.plot_learning_curve(run_dir, history, task)
        if stopped_by:
            name = signal.Signals(stopped_by).name
            say(topo, f"stopped by {name} after iteration {iteration}; checkpoint "
                      f"{out.checkpoint_path(run_dir, iteration)}; resume with --resume")
        else:
            episodes = int(hp.get("eval_episodes", 5))
            returns = evaluate(task, backend.act_deterministic, episodes, seed)
            mean_eval = float(np.mean(returns))
            out.atomic_write(run_dir / "evaluation.json", json.dumps(
                {"mean_return": mean_eval, "returns": returns, "iterations": iteration,
                 "env_steps": env_steps, "train_seconds": train_s}).encode())
            scalars_final = out.Scalars(run_dir)
            scalars_final.add(env_steps, {"Eval/mean_return": mean_eval})
            scalars_final.close()
            say(topo, f"done: {iteration} iterations, {env_steps} env steps, {train_s:.1f} s training; "
                      f"plot {plot}")
            say(topo, f"evaluation: mean_return={mean_eval:.1f} over {episodes} episodes (deterministic policy)")
        say(topo, f"run_dir: {run_dir}")
    if stopped_by:
        code = 128 + stopped_by
    env.close()
    backend.close()
    return code

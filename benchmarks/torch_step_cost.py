"""CPU per training iteration of the torch back end: this checkout's examples/ against another's.

    git worktree add /tmp/before HEAD~1      # or any copy of an earlier examples/
    python benchmarks/torch_step_cost.py --baseline /tmp/before/examples [--task Pendulum-v1]
                                         [--iterations 60] [--num_envs 8]

One process, one thread, no distribution: both versions' ``TorchBackend`` are built on the same
seeds and their iterations (``rollouts`` env steps, then skrl's PPO update) interleaved, in turn
first, each with its own torch random number generator state, so both see the same load. Prints the
CPU time (this thread's) per iteration of each, their ratio, the CPU of each one's final evaluation,
whether both took the same actions, ended with the same parameters and evaluated the same, and the
load average (figures taken while other work shares the cores mean little).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _backend_class(examples: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, examples / "trainers" / "trainer_torch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TorchBackend


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, type=Path, help="another checkout's examples/ folder")
    p.add_argument("--task", default="CartPole-v1")
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--num_envs", type=int, default=8)
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)

    sys.path.insert(0, str(EXAMPLES / "trainers"))
    import numpy as np
    import torch
    import yaml

    import trainer_args
    import trainer_dist
    from trainer_env import env_seeds, evaluate, make_vec_env
    from trainer_ppo import for_framework

    topo = trainer_dist.setup_torch(trainer_dist.read_topology(trainer_args.parse_args([])))
    hp = for_framework(yaml.safe_load((EXAMPLES / "agents" / f"{args.task}.yaml").read_text()), "torch")
    scale = float(hp.get("reward_scale", 1.0))
    runs = []
    for label, examples in (("baseline", args.baseline.resolve()), ("this", EXAMPLES)):
        env = make_vec_env(args.task, args.num_envs)
        backend = _backend_class(examples, f"trainer_torch_{label}")(
            topo=topo,
            observation_space=env.single_observation_space,
            action_space=env.single_action_space,
            num_envs=args.num_envs,
            agent_cfg=dict(hp["agent"]),
            model_cfg=dict(hp.get("models", {})),
            rank_seed=42,
        )
        obs, _ = env.reset(seed=env_seeds(42, args.num_envs))
        runs.append({"label": label, "b": backend, "env": env, "obs": obs, "rng": torch.get_rng_state(), "cpu": 0.0})
    same_actions = True
    rollouts, timesteps = runs[0]["b"].rollouts, args.iterations * runs[0]["b"].rollouts
    gc.freeze()
    for iteration in range(args.iterations):
        actions = []
        for run in runs if iteration % 2 == 0 else runs[::-1]:
            torch.set_rng_state(run["rng"])
            b, env, obs, taken = run["b"], run["env"], run["obs"], []
            t0 = time.thread_time()
            for step in range(rollouts):
                timestep = iteration * rollouts + step
                a = b.act(obs, timestep, timesteps)
                next_obs, rewards, terminated, truncated, _ = env.step(a)
                b.record(rewards * scale, next_obs, terminated, truncated, timestep, timesteps)
                b.post_interaction(timestep, timesteps)
                obs = next_obs
                taken.append(a)
            run["cpu"] += time.thread_time() - t0
            run["obs"], run["rng"] = obs, torch.get_rng_state()
            actions.append(taken)
        same_actions &= all(np.array_equal(x, y) for x, y in zip(*actions))
    returns = []
    for run in runs:
        t0 = time.thread_time()
        returns.append(evaluate(args.task, run["b"].act_deterministic, int(hp.get("eval_episodes", 5)), 42))
        run["eval_cpu"] = time.thread_time() - t0
    base, this = (run["cpu"] / args.iterations * 1000 for run in runs)
    same_params = np.array_equal(runs[0]["b"].policy_vector(), runs[1]["b"].policy_vector())
    print(f"{args.task}, {args.iterations} iterations of {rollouts} steps x {args.num_envs} envs")
    print(f"CPU per iteration: baseline {base:.2f} ms, this {this:.2f} ms, ratio {this / base:.3f}")
    print(f"evaluation CPU: baseline {runs[0]['eval_cpu']:.3f} s, this {runs[1]['eval_cpu']:.3f} s")
    print(f"same actions {same_actions}, same parameters {same_params}, same evaluation {returns[0] == returns[1]}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

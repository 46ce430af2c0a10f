"""One process, no distribution: the example trainer's torch back end against the plain way of driving
skrl's PPO (the modules called, ``torch.no_grad``), side by side on the same seeds; prints JSON.

For each task: the actions of every step, the parameters after a few iterations (updates included)
and the evaluation returns of both; how many ``nn.Module`` calls the back end made in its rollout,
update and evaluation (a global forward pre-hook counts them); whether the rollout's tensors are
inference tensors; whether the evaluation drew from torch's random number generator.
Used by tests/test_trainer_torch_rollout.py.
"""

import json
import sys
from pathlib import Path

TRAINERS = Path(__file__).resolve().parents[2] / "examples" / "trainers"
sys.path.insert(0, str(TRAINERS))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import trainer_args  # noqa: E402
import trainer_dist  # noqa: E402

ITERATIONS, NUM_ENVS, SEED = 3, 4, 7


class Reference:
    """skrl's PPO driven the plain way: the networks' modules called, under no_grad."""

    def __init__(self, backend) -> None:
        self.b = backend
        model = backend.agent.policy
        model._policy_output = lambda inputs: model.policy_head(model.policy_body(inputs["observations"]))
        model._value_output = lambda inputs: model.value_head(model.value_body(inputs["observations"]))

    def act(self, obs, timestep, timesteps):
        b = self.b
        with torch.no_grad():
            b._obs = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
            b._actions, _ = b.agent.act(b._obs, None, timestep=timestep, timesteps=timesteps)
        a = b._actions.cpu().numpy()
        return a.reshape(-1).astype(np.int64) if b.discrete else a

    def record(self, rewards, next_obs, terminated, truncated, timestep, timesteps):
        b, n = self.b, len(rewards)

        def t(x, dtype=torch.float32):
            return torch.as_tensor(np.asarray(x), dtype=dtype)

        with torch.no_grad():
            b.agent.record_transition(
                observations=b._obs,
                states=None,
                actions=b._actions,
                rewards=t(rewards).view(n, 1),
                next_observations=t(next_obs),
                next_states=None,
                terminated=t(terminated, torch.bool).view(n, 1),
                truncated=t(truncated, torch.bool).view(n, 1),
                infos={},
                timestep=timestep,
                timesteps=timesteps,
            )

    def post_interaction(self, timestep, timesteps):
        self.b.post_interaction(timestep, timesteps)

    def act_deterministic(self, obs):
        b = self.b
        with torch.no_grad():
            _, out = b.agent.policy.act({"observations": torch.as_tensor(obs, dtype=torch.float32)}, role="policy")
        if b.discrete:
            return out["net_output"].argmax(dim=-1).cpu().numpy()
        return np.clip(out["mean_actions"].cpu().numpy(), b._low, b._high)


def run(driver, task, env, rollouts, calls) -> dict:
    from trainer_env import env_seeds, evaluate

    obs, _ = env.reset(seed=env_seeds(SEED, NUM_ENVS))
    timesteps = ITERATIONS * rollouts
    b = getattr(driver, "b", driver)
    initial = b.policy_vector().tolist()
    actions = []
    calls[0] = 0
    for timestep in range(timesteps):
        a = driver.act(obs, timestep, timesteps)
        actions.append(np.asarray(a).tolist())
        obs, rewards, terminated, truncated, _ = env.step(a)
        driver.record(rewards, obs, terminated, truncated, timestep, timesteps)
        driver.post_interaction(timestep, timesteps)  # the PPO update after every `rollouts` steps
    training_calls = calls[0]
    calls[0] = 0
    rng = torch.get_rng_state()
    returns = evaluate(task, driver.act_deterministic, 2, SEED)
    return {
        "actions": actions,
        "params": b.policy_vector().tolist(),
        "params_moved": b.policy_vector().tolist() != initial,
        "eval": returns,
        "calls_training": training_calls,
        "calls_eval": calls[0],
        "inference_tensors": torch.is_inference(b._actions),
        "eval_drew_random_numbers": not torch.equal(rng, torch.get_rng_state()),
    }


def main() -> None:
    topo = trainer_dist.setup_torch(trainer_dist.read_topology(trainer_args.parse_args([])))
    import yaml

    from trainer_env import make_vec_env
    from trainer_ppo import for_framework
    from trainer_torch import TorchBackend

    calls = [0]

    def count(_module, _args):
        calls[0] += 1

    torch.nn.modules.module.register_module_forward_pre_hook(count)
    report = {}
    for task in ("CartPole-v1", "Pendulum-v1"):
        hp = for_framework(yaml.safe_load((trainer_args.AGENTS_DIR / f"{task}.yaml").read_text()), "torch")
        results = []
        for wrap in (lambda b: b, Reference):
            env = make_vec_env(task, NUM_ENVS)
            backend = TorchBackend(
                topo=topo,
                observation_space=env.single_observation_space,
                action_space=env.single_action_space,
                num_envs=NUM_ENVS,
                agent_cfg=dict(hp["agent"], rollouts=16),
                model_cfg=dict(hp.get("models", {})),
                rank_seed=SEED,
            )
            results.append(run(wrap(backend), task, env, 16, calls))
            env.close()
        trainer, reference = results
        report[task] = {
            "same_actions": trainer["actions"] == reference["actions"],
            "same_params": trainer["params"] == reference["params"],
            "same_eval": trainer["eval"] == reference["eval"],
            "params_moved": trainer["params_moved"],
            **{
                k: trainer[k] for k in ("calls_training", "calls_eval", "inference_tensors", "eval_drew_random_numbers")
            },
            "reference_calls_training": reference["calls_training"],
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()

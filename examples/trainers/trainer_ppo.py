"""The skrl PPO agent as both back ends build it; the framework's classes are passed in."""

from __future__ import annotations

import numpy as np

FRAMEWORKS = ("torch", "jax")


def for_framework(hp: dict, framework: str) -> dict:
    """The hyperparameters one back end trains with: the agent file's shared keys, with its
    ``torch:`` or ``jax:`` section (same layout, any subset) merged over them; both sections are
    dropped from the result, which is what run_info.json records.

    >>> hp = {"seed": 42, "agent": {"rollouts": 64, "learning_epochs": 5}, "jax": {"agent": {"learning_epochs": 10}}}
    >>> for_framework(hp, "jax")
    {'seed': 42, 'agent': {'rollouts': 64, 'learning_epochs': 10}}
    >>> for_framework(hp, "torch")
    {'seed': 42, 'agent': {'rollouts': 64, 'learning_epochs': 5}}
    """

    def merge(base: dict, over: dict) -> dict:
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    shared = {k: v for k, v in hp.items() if k not in FRAMEWORKS}
    return merge(shared, hp.get(framework) or {})


def build_agent(
    ppo,
    ppo_cfg,
    memory_cls,
    models: dict,
    agent_cfg: dict,
    num_envs: int,
    device,
    observation_space,
    action_space,
    **cfg_fields,
):
    """A PPO agent in training mode. The loop writes logs and checkpoints itself (one per iteration,
    atomically, rank 0 only), so skrl's own writers are off. When distributed, PPO broadcasts rank
    0's initial parameters and averages gradients over the ranks."""
    cfg = ppo_cfg(**agent_cfg)
    for name, value in cfg_fields.items():
        setattr(cfg, name, value)
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    memory = memory_cls(memory_size=cfg.rollouts, num_envs=num_envs, device=device)
    agent = ppo(
        models=models,
        memory=memory,
        observation_space=observation_space,
        action_space=action_space,
        device=device,
        cfg=cfg,
    )
    agent.init()
    agent.enable_training_mode(True)
    return agent


def pop_stats(agent) -> dict[str, float]:
    """The mean of each loss skrl tracked since the last call (then forgotten)."""
    data = agent.tracking_data
    stats = {k: float(np.mean(v)) for k, v in data.items() if k.startswith("Loss") and v}
    data.clear()
    return stats

"""Vectorised gymnasium environments (numpy in, numpy out) and their seeding.

Same-step autoreset: when an episode ends, ``step`` already returns the first observation of the
next episode, so every stored transition is a real one (gymnasium 1.x's default, next-step
autoreset, would insert a dummy transition after each episode end).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv


def env_seeds(rank_seed: int, num_envs: int, stream: int = 0) -> list[int]:
    """Independent seeds for the envs of one worker (rank_seed = base seed + global rank).

    ``stream`` separates uses: 0 for the first training reset, the iteration number when training is
    resumed, and a large constant for evaluation.
    """
    seq = np.random.SeedSequence([rank_seed, stream])
    return [int(s) for s in seq.generate_state(num_envs, dtype=np.uint32)]


def make_vec_env(task: str, num_envs: int) -> SyncVectorEnv:
    # Synchronous on purpose: one process per worker and one core each; subprocess envs would
    # oversubscribe the CPUs that the other workers need.
    return SyncVectorEnv([lambda: gym.make(task) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP)


class EpisodeTracker:
    """Undiscounted returns of episodes as they finish."""

    def __init__(self, num_envs: int) -> None:
        self._running = np.zeros(num_envs, dtype=np.float64)
        self.finished: list[float] = []

    def step(self, rewards: np.ndarray, done: np.ndarray) -> None:
        self._running += rewards
        if done.any():
            self.finished.extend(self._running[done].tolist())
            self._running[done] = 0.0

    def pop(self) -> list[float]:
        out, self.finished = self.finished, []
        return out


def evaluate(task: str, act_deterministic, episodes: int, seed: int) -> list[float]:
    """Mean-action / arg-max policy for ``episodes`` episodes, one env each, run side by side."""
    env = make_vec_env(task, episodes)
    try:
        obs, _ = env.reset(seed=env_seeds(seed, episodes, stream=1_000_003))
        returns = np.zeros(episodes)
        running = np.ones(episodes, dtype=bool)
        while running.any():
            obs, rew, term, trunc, _ = env.step(act_deterministic(obs))
            returns += rew * running
            running &= ~(term | trunc)
        return returns.tolist()
    finally:
        env.close()

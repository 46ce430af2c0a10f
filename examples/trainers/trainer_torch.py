"""skrl PPO with PyTorch models: the framework-specific half of the trainer.

Imported only after ``trainer_dist.setup_torch`` has set up the process group and skrl's config.
"""

from __future__ import annotations

import io

import gymnasium
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, GaussianMixin, Model

from trainer_ppo import build_agent

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def _mlp(inputs: int, hidden: list[int], activation: str) -> tuple[nn.Sequential, int]:
    layers, size = [], inputs
    for h in hidden:
        layers += [nn.Linear(size, h), _ACTIVATIONS[activation]()]
        size = h
    return nn.Sequential(*layers), size


def _run(body: nn.Sequential, head: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The MLP applied layer by layer through each layer's ``forward``: the same operations, in the
    same order, as calling the modules, without ``nn.Module.__call__``'s hook dispatch around each of
    them (6 calls per network, two networks per environment step). No hooks are registered on these
    layers, so nothing is skipped."""
    for layer in body:
        x = layer.forward(x)
    return head.forward(x)


class _ActorCriticBase(Model):
    """Policy and value networks held by ONE skrl model (separate MLPs, no shared layers).

    skrl's PPO treats a model used for both roles as shared: one optimiser and one gradient
    all-reduce per mini-batch instead of two.  Each collective costs a cross-process wake-up
    (0.5-2 ms on a small VM), so this halves the synchronisation cost of distributed training.
    """

    def _build(self, hidden, activation, policy_outputs: int) -> None:
        self.policy_body, size = _mlp(self.num_observations, hidden, activation)
        self.policy_head = nn.Linear(size, policy_outputs)
        self.value_body, size = _mlp(self.num_observations, hidden, activation)
        self.value_head = nn.Linear(size, 1)

    def _policy_output(self, inputs):
        return _run(self.policy_body, self.policy_head, inputs["observations"])

    def _value_output(self, inputs):
        return _run(self.value_body, self.value_head, inputs["observations"])


class DiscreteActorCritic(CategoricalMixin, DeterministicMixin, _ActorCriticBase):
    def __init__(self, observation_space, action_space, device, hidden, activation):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        CategoricalMixin.__init__(self, unnormalized_log_prob=True, role="policy")
        DeterministicMixin.__init__(self, clip_actions=False, role="value")
        self._build(hidden, activation, action_space.n)

    def act(self, inputs, *, role=""):
        if role == "value":
            return DeterministicMixin.act(self, inputs, role=role)
        return CategoricalMixin.act(self, inputs, role=role)

    def compute(self, inputs, role=""):
        return (self._value_output(inputs) if role == "value" else self._policy_output(inputs)), {}


class ContinuousActorCritic(GaussianMixin, DeterministicMixin, _ActorCriticBase):
    def __init__(self, observation_space, action_space, device, hidden, activation, initial_log_std=0.0):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
        GaussianMixin.__init__(
            self, clip_actions=True, clip_log_std=True, min_log_std=-5.0, max_log_std=2.0, role="policy"
        )
        DeterministicMixin.__init__(self, clip_actions=False, role="value")
        self._build(hidden, activation, self.num_actions)
        self.log_std = nn.Parameter(torch.full((self.num_actions,), float(initial_log_std)))

    def act(self, inputs, *, role=""):
        if role == "value":
            return DeterministicMixin.act(self, inputs, role=role)
        return GaussianMixin.act(self, inputs, role=role)

    def compute(self, inputs, role=""):
        if role == "value":
            return self._value_output(inputs), {}
        return self._policy_output(inputs), {"log_std": self.log_std}


class TorchBackend:
    """What the framework-neutral loop needs: act, record, update, save/load, collectives."""

    name = "torch"

    def __init__(
        self, *, topo, observation_space, action_space, num_envs: int, agent_cfg: dict, model_cfg: dict, rank_seed: int
    ) -> None:
        torch.manual_seed(rank_seed)
        self.topo = topo
        self.device = torch.device(topo.device)
        self.discrete = isinstance(action_space, gymnasium.spaces.Discrete)
        hidden, act = list(model_cfg.get("hidden", [64, 64])), model_cfg.get("activation", "tanh")
        if self.discrete:
            model = DiscreteActorCritic(observation_space, action_space, self.device, hidden, act)
        else:
            model = ContinuousActorCritic(
                observation_space, action_space, self.device, hidden, act, model_cfg.get("initial_log_std", 0.0)
            )
            self._low, self._high = action_space.low, action_space.high
        self.agent = build_agent(
            PPO,
            PPO_CFG,
            RandomMemory,
            {"policy": model, "value": model},
            agent_cfg,
            num_envs,
            self.device,
            observation_space,
            action_space,
        )
        self.rollouts = self.agent.cfg.rollouts
        self._obs = None

    # -- interaction -------------------------------------------------------------------------
    def _tensor(self, x, dtype=torch.float32):
        return torch.as_tensor(np.asarray(x), dtype=dtype, device=self.device)

    # The rollout and the evaluation run under inference mode, not just no_grad: no autograd
    # bookkeeping (version counters, views' metadata) on any of their tensors, the same kernels. skrl
    # copies what it keeps of them into its memory's ordinary tensors; the update uses those.
    def act(self, obs: np.ndarray, timestep: int, timesteps: int) -> np.ndarray:
        with torch.inference_mode():
            self._obs = self._tensor(obs)
            self._actions, _ = self.agent.act(self._obs, None, timestep=timestep, timesteps=timesteps)
        a = self._actions.cpu().numpy()
        return a.reshape(-1).astype(np.int64) if self.discrete else a

    def record(self, rewards, next_obs, terminated, truncated, timestep: int, timesteps: int) -> None:
        n = len(rewards)
        with torch.inference_mode():
            self.agent.record_transition(
                observations=self._obs,
                states=None,
                actions=self._actions,
                rewards=self._tensor(rewards).view(n, 1),
                next_observations=self._tensor(next_obs),
                next_states=None,
                terminated=self._tensor(terminated, torch.bool).view(n, 1),
                truncated=self._tensor(truncated, torch.bool).view(n, 1),
                infos={},
                timestep=timestep,
                timesteps=timesteps,
            )

    def post_interaction(self, timestep: int, timesteps: int) -> None:
        # Runs the PPO update (with the gradient all-reduce) after every `rollouts` steps.
        self.agent.post_interaction(timestep=timestep, timesteps=timesteps)

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        # the policy network's output itself (skrl's "net_output" / "mean_actions"), without building
        # the distribution and drawing a sample that the arg-max / mean would throw away
        with torch.inference_mode():
            out = self.agent.policy.compute({"observations": self._tensor(obs)}, role="policy")[0]
        if self.discrete:
            return out.argmax(dim=-1).cpu().numpy()
        return np.clip(out.cpu().numpy(), self._low, self._high)

    def set_learning_rate(self, lr: float) -> None:
        for group in self.agent.optimizer.param_groups:
            group["lr"] = lr

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"model": self.agent.policy.state_dict(), "optimizer": self.agent.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.agent.policy.load_state_dict(state["model"])
        self.agent.optimizer.load_state_dict(state["optimizer"])

    def dumps(self, obj) -> bytes:
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()

    def loads(self, data: bytes):
        return torch.load(io.BytesIO(data), map_location=self.device, weights_only=False)

    def policy_vector(self) -> np.ndarray:
        # all trainable parameters (policy and value networks live in one model)
        return torch.cat([p.detach().reshape(-1).cpu() for p in self.agent.policy.parameters()]).numpy()

    def optimizer_steps(self) -> int:
        steps = [float(s["step"]) for s in self.agent.optimizer.state.values() if "step" in s]
        return int(max(steps)) if steps else 0

    # -- collectives (no-ops in a single process) -----------------------------------------------
    def allgather_floats(self, values: list[float]) -> np.ndarray:
        """(world_size, len(values)) array of every rank's values."""
        local = torch.tensor(values, dtype=torch.float64)
        if not self.topo.distributed:
            return local.numpy()[None]
        if self.topo.backend == "nccl":
            local = local.to(self.device)
        out = [torch.zeros_like(local) for _ in range(self.topo.world_size)]
        dist.all_gather(out, local)
        return torch.stack(out).cpu().numpy()

    def broadcast_bytes(self, data: bytes | None) -> bytes | None:
        if not self.topo.distributed:
            return data
        box = [data]
        dist.broadcast_object_list(box, src=0, device=self.device if self.topo.backend == "nccl" else None)
        return box[0]

    def close(self) -> None:
        import trainer_dist

        trainer_dist.teardown_torch(self.topo)

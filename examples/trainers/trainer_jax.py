"""skrl PPO with JAX/Flax models: the framework-specific half of the trainer.

Imported only after ``trainer_dist.setup_jax`` has started the JAX distributed client (gloo CPU
collectives on CPU) and set skrl's config.
"""

from __future__ import annotations

import functools
import pickle

import flax
import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from skrl import config
from skrl.agents.jax.ppo import PPO_CFG
from skrl.agents.jax.ppo import ppo as skrl_ppo
from skrl.memories.jax import RandomMemory
from skrl.models.jax import CategoricalMixin, DeterministicMixin, GaussianMixin, Model
from skrl.models.jax.base import StateDict
from skrl.utils.spaces.jax import flatten_tensorized_space, sample_space

from trainer_fused import FusedPPO
from trainer_ppo import build_agent

_ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "elu": nn.elu}


def _body(x, hidden, activation):
    for h in hidden:
        x = _ACTIVATIONS[activation](nn.Dense(h)(x))
    return x


@functools.partial(jax.jit, static_argnames=("time_limit_bootstrap",))
def compute_gae(
    rewards,
    terminated,
    truncated,
    values,
    last_values,
    discount_factor=0.99,
    lambda_coefficient=0.95,
    time_limit_bootstrap=False,
):
    """skrl's ``_compute_gae`` (same arguments, same arithmetic per step) as one ``lax.scan``.

    skrl's version unrolls a Python loop over the rollout into 64 chained updates, which XLA took
    15-30 s to compile on a 2-core CPU (half of the default job's compile time); the scan
    compiles in well under a second.  Installed in skrl's PPO module by :func:`install_fast_gae`.
    """
    not_done = jnp.logical_not(jnp.logical_or(terminated, truncated) if time_limit_bootstrap else terminated)
    next_values = jnp.concatenate([values[1:], last_values[None]])

    def step(advantage, x):
        reward, value, next_value, keep = x
        advantage = reward - value + discount_factor * keep * (next_value + lambda_coefficient * advantage)
        return advantage, advantage

    _, advantages = jax.lax.scan(
        step, jnp.zeros_like(last_values), (rewards, values, next_values, not_done), reverse=True
    )
    returns = advantages + values
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return returns, advantages


def install_fast_gae() -> None:
    """Make skrl's JAX PPO (``PPO.update`` looks ``_compute_gae`` up in its module) use :func:`compute_gae`."""
    skrl_ppo._compute_gae = compute_gae


install_fast_gae()


# Flax re-creates modules from their constructor fields, so the layer sizes are class attributes
# (see _configured) rather than constructor arguments.
class CategoricalPolicy(CategoricalMixin, Model):
    hidden, activation, initial_log_std = (64, 64), "tanh", 0.0

    def __init__(self, observation_space=None, state_space=None, action_space=None, device=None, **kwargs):
        Model.__init__(
            self,
            observation_space=observation_space,
            state_space=state_space,
            action_space=action_space,
            device=device,
            **kwargs,
        )
        CategoricalMixin.__init__(self, unnormalized_log_prob=True)

    def act(self, inputs, *, role="", params=None):
        """skrl's categorical ``act``, with the logits where PPO's entropy bonus looks for them.

        skrl 2.1's JAX ``CategoricalMixin`` returns ``stddev`` filled with NaN, and PPO computes the
        entropy from it (``get_entropy(outputs["stddev"])``, which expects the logits): the bonus
        was a NaN constant with no gradient, so ``entropy_loss_scale`` did nothing in JAX while the
        torch back end applied it (the logged entropy loss was NaN).
        """
        actions, outputs = CategoricalMixin.act(self, inputs, role=role, params=params)
        outputs["stddev"] = outputs["net_output"]
        return actions, outputs

    @nn.compact
    def __call__(self, inputs, role):
        return nn.Dense(int(self.action_space.n))(_body(inputs["observations"], self.hidden, self.activation)), {}


class GaussianPolicy(GaussianMixin, Model):
    hidden, activation, initial_log_std = (64, 64), "tanh", 0.0

    def __init__(self, observation_space=None, state_space=None, action_space=None, device=None, **kwargs):
        Model.__init__(
            self,
            observation_space=observation_space,
            state_space=state_space,
            action_space=action_space,
            device=device,
            **kwargs,
        )
        GaussianMixin.__init__(self, clip_actions=True, clip_log_std=True, min_log_std=-5.0, max_log_std=2.0)

    @nn.compact
    def __call__(self, inputs, role):
        mean = nn.Dense(self.num_actions)(_body(inputs["observations"], self.hidden, self.activation))
        log_std = self.param("log_std", lambda _: jnp.full(self.num_actions, self.initial_log_std))
        return mean, {"log_std": log_std}


class Value(DeterministicMixin, Model):
    hidden, activation, initial_log_std = (64, 64), "tanh", 0.0

    def __init__(self, observation_space=None, state_space=None, action_space=None, device=None, **kwargs):
        Model.__init__(
            self,
            observation_space=observation_space,
            state_space=state_space,
            action_space=action_space,
            device=device,
            **kwargs,
        )
        DeterministicMixin.__init__(self, clip_actions=False)

    @nn.compact
    def __call__(self, inputs, role):
        return nn.Dense(1)(_body(inputs["observations"], self.hidden, self.activation)), {}


def _configured(cls, model_cfg: dict):
    attrs = {
        "hidden": tuple(model_cfg.get("hidden", [64, 64])),
        "activation": model_cfg.get("activation", "tanh"),
        "initial_log_std": float(model_cfg.get("initial_log_std", 0.0)),
        "__init__": cls.__init__,
    }  # keep our __init__: Flax would generate one for a bare subclass
    return type(cls.__name__, (cls,), attrs)


def init_state_dict(model, role: str) -> None:
    """skrl's ``Model.init_state_dict(role=role)`` (the same sample inputs, key and values), with
    flax's initialisation compiled as one program.

    Run eagerly, every operation of it (each layer's random draws, scaled and truncated) is a
    program of its own, traced, lowered and loaded from the compilation cache one by one at every
    start-up, a restart's too; jitted, the same arithmetic is one program (the same parameters,
    bit for bit: tests/test_trainer_jax_fused.py). The sample inputs are drawn as skrl draws them
    (the same draws of the spaces' generators) but kept in numpy: made JAX arrays, each was a
    program too (the parameters depend on their shapes only).
    """
    inputs = {
        name: flatten_tensorized_space(sample_space(space, backend="numpy"))
        for name, space in (
            ("observations", model.observation_space),
            ("states", model.state_space),
            ("taken_actions", model.action_space),
        )
    }
    key = config.jax.key
    with jax.default_device(model.device):
        params = jax.jit(model.init, static_argnums=2)(key, inputs, role)
        model.state_dict = StateDict.create(apply_fn=model.apply, params=params)


class _UnitSchedule:
    """A 'scheduler' that always answers 1.0.

    Its presence makes skrl's JAX PPO apply the learning rate from ``agent.*_learning_rate`` at every
    step (instead of baking it into optax.adam), so the loop can anneal it like the torch back end.
    """

    def __call__(self, timestep):
        return 1.0


def _find(tree, key):
    if isinstance(tree, dict):
        for k, v in tree.items():
            if k == key:
                return v
            found = _find(v, key)
            if found is not None:
                return found
    return None


class JaxBackend:
    name = "jax"

    def __init__(
        self, *, topo, observation_space, action_space, num_envs: int, agent_cfg: dict, model_cfg: dict, rank_seed: int
    ) -> None:
        config.jax.key = rank_seed  # action sampling differs per rank; initial params come from rank 0
        self.topo = topo
        self.device = config.jax.device
        self.discrete = isinstance(action_space, gymnasium.spaces.Discrete)
        policy_cls = CategoricalPolicy if self.discrete else GaussianPolicy
        if not self.discrete:
            self._low, self._high = action_space.low, action_space.high
        spaces = {"observation_space": observation_space, "action_space": action_space, "device": self.device}
        policy = _configured(policy_cls, model_cfg)(**spaces)
        value = _configured(Value, model_cfg)(**spaces)
        init_state_dict(policy, "policy")
        init_state_dict(value, "value")
        self.agent = build_agent(
            FusedPPO,
            PPO_CFG,
            RandomMemory,
            {"policy": policy, "value": value},
            agent_cfg,
            num_envs,
            self.device,
            observation_space,
            action_space,
            learning_rate_scheduler=_UnitSchedule,
        )
        self.rollouts = self.agent.cfg.rollouts
        self._obs = None
        self._commit()

    def _commit(self) -> None:
        """Place the parameters and optimiser states on this rank's device (committed arrays).

        Fresh ones are uncommitted, the updated ones committed (their gradients come from the
        all-reduce): without this, every jitted function that takes them compiles twice, once for
        each placement, and the second iteration paid seconds of compilation again.
        """
        a = self.agent
        for model in (a.policy, a.value):
            model.state_dict = model.state_dict.replace(params=jax.device_put(model.state_dict.params, self.device))
        a.policy_optimizer = a.policy_optimizer.replace(state=jax.device_put(a.policy_optimizer.state, self.device))
        a.value_optimizer = a.value_optimizer.replace(state=jax.device_put(a.value_optimizer.state, self.device))

    def _array(self, x, dtype=jnp.float32):
        return jnp.asarray(np.asarray(x), dtype=dtype)

    def act(self, obs, timestep, timesteps):
        # numpy in: the jitted step takes it as is; FusedPPO keeps the step's arrays until the update
        self._obs = np.asarray(obs, dtype=np.float32)
        self._actions, _ = self.agent.act(self._obs, None, timestep=timestep, timesteps=timesteps)
        a = np.asarray(self._actions)
        self._actions = a
        return a.reshape(-1).astype(np.int64) if self.discrete else a

    def record(self, rewards, next_obs, terminated, truncated, timestep, timesteps):
        n = len(rewards)
        self.agent.record_transition(
            observations=self._obs,
            states=None,
            actions=self._actions,
            rewards=np.asarray(rewards, np.float32).reshape(n, 1),
            next_observations=np.asarray(next_obs, np.float32),
            next_states=None,
            terminated=np.asarray(terminated, np.int8).reshape(n, 1),
            truncated=np.asarray(truncated, np.int8).reshape(n, 1),
            infos={},
            timestep=timestep,
            timesteps=timesteps,
        )

    def post_interaction(self, timestep, timesteps):
        self.agent.post_interaction(timestep=timestep, timesteps=timesteps)

    def act_deterministic(self, obs):
        out = self._deterministic(self.agent.policy.state_dict.params, np.asarray(obs, np.float32))
        return np.asarray(out) if self.discrete else np.clip(np.asarray(out), self._low, self._high)

    @functools.partial(jax.jit, static_argnums=0)
    def _deterministic(self, params, obs):
        """The evaluation's action in one compiled call: arg-max of the logits, or the mean action."""
        _, out = self.agent.policy.act({"observations": obs}, role="policy", params=params)
        return jnp.argmax(out["net_output"], axis=-1) if self.discrete else out["mean_actions"]

    def set_learning_rate(self, lr: float) -> None:
        self.agent.policy_learning_rate = lr
        self.agent.value_learning_rate = lr

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        sd = flax.serialization.to_state_dict
        a = self.agent
        return jax.device_get(
            {
                "policy": sd(a.policy.state_dict.params),
                "value": sd(a.value.state_dict.params),
                "policy_optimizer": sd(a.policy_optimizer.state),
                "value_optimizer": sd(a.value_optimizer.state),
            }
        )

    def load_state_dict(self, state: dict) -> None:
        fd = flax.serialization.from_state_dict
        a = self.agent
        for model, key in ((a.policy, "policy"), (a.value, "value")):
            model.state_dict = model.state_dict.replace(params=jax.device_put(fd(model.state_dict.params, state[key])))
        a.policy_optimizer = a.policy_optimizer.replace(state=fd(a.policy_optimizer.state, state["policy_optimizer"]))
        a.value_optimizer = a.value_optimizer.replace(state=fd(a.value_optimizer.state, state["value_optimizer"]))
        self._commit()

    def dumps(self, obj) -> bytes:
        return pickle.dumps(obj, protocol=4)

    def loads(self, data: bytes):
        return pickle.loads(data)

    def policy_vector(self) -> np.ndarray:
        leaves = jax.tree_util.tree_leaves((self.agent.policy.state_dict.params, self.agent.value.state_dict.params))
        return np.concatenate([np.asarray(x).reshape(-1) for x in leaves])

    def optimizer_steps(self) -> int:
        count = _find(flax.serialization.to_state_dict(self.agent.policy_optimizer.state), "count")
        return int(np.asarray(count)) if count is not None else 0

    # -- collectives -----------------------------------------------------------------------------
    def allgather_floats(self, values):
        local = np.asarray(values, dtype=np.float32)
        if not self.topo.distributed:
            return local[None]
        return np.asarray(multihost_utils.process_allgather(local)).reshape(self.topo.world_size, -1)

    def broadcast_bytes(self, data):
        if not self.topo.distributed:
            return data
        is_source = self.topo.rank == 0
        n = int(multihost_utils.broadcast_one_to_all(np.int32(-1 if data is None else len(data)), is_source=is_source))
        if n < 0:
            return None
        buf = np.frombuffer(data, dtype=np.uint8) if is_source else np.zeros(n, dtype=np.uint8)
        return np.asarray(multihost_utils.broadcast_one_to_all(buf, is_source=is_source)).tobytes() if n else b""

    def close(self) -> None:
        pass

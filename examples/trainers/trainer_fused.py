"""skrl's JAX PPO with its hot paths compiled: one XLA call per environment step, one per update.

skrl's ``PPO`` dispatches every small array operation of a step from Python (the policy, the value,
the memory's per-tensor writes: about 2.6 ms a step on a 2-core CPU) and runs its update as a Python
loop over epochs and mini-batches with a gradient all-reduce and an optimiser step between jitted
pieces. ``FusedPPO`` is the same agent (skrl's models, optimisers, configuration, checkpointable
state) and the same algorithm, arranged for XLA:

- ``act``: the policy's action sampling (skrl's ``act`` of the model, with skrl's per-call key
  ``fold_in(key, i)``) and the value estimate in one jitted call; ``record_transition`` keeps the
  step's arrays on the host until the rollout is complete.
- ``update``: skrl's ``update`` -- the last values, GAE, then for every epoch a shuffled pass over
  the mini-batches with skrl's own ``_update_policy`` and ``_update_value`` losses, the mean of the
  gradients over the ranks (one all-reduce per mini-batch for both models: the value loss does not
  read the policy's parameters, so skrl's order -- policy step, then value gradient -- gives the same
  numbers) and skrl's Adam steps --
  as one program under ``jax.pmap``: the all-reduces run inside it (``lax.psum`` over every rank).
  The shuffles come from numpy's global generator, as in skrl's ``RandomMemory.sample``.

Not supported (the trainer says so at start): ``kl_threshold`` (an early stop decided on the host),
a KL-adaptive learning rate, preprocessors, ``rewards_shaper``, ``time_limit_bootstrap``, mini-batches
that do not divide the rollout evenly.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from skrl import config
from skrl.agents.jax.ppo import PPO
from skrl.agents.jax.ppo import ppo as skrl_ppo
from skrl.resources.optimizers.jax import adam as skrl_adam

AXIS = "ranks"
UNUSED_KEY = np.zeros(2, np.uint32)  # the key of draws whose result is not used (see FusedPPO._update_fn)


def unsupported(cfg, rollouts_x_envs: int) -> list[str]:
    """The settings of a PPO_CFG that FusedPPO does not implement (empty: all is well)."""
    bad = []
    if cfg.kl_threshold:
        bad.append("kl_threshold")
    for name in ("observation_preprocessor", "state_preprocessor", "value_preprocessor", "rewards_shaper"):
        if getattr(cfg, name, None):
            bad.append(name)
    if cfg.time_limit_bootstrap:
        bad.append("time_limit_bootstrap")
    schedulers = cfg.learning_rate_scheduler
    for s in schedulers if isinstance(schedulers, (list, tuple)) else [schedulers]:
        if s is not None and "kladaptive" in getattr(s, "__qualname__", "").lower().replace("_", ""):
            bad.append("learning_rate_scheduler=KLAdaptiveLR")
    if rollouts_x_envs % cfg.mini_batches:
        bad.append(f"mini_batches={cfg.mini_batches} (does not divide rollouts x num_envs = {rollouts_x_envs})")
    return bad


class _StepKey:
    """Run a skrl model's ``act`` under jit with the key of step ``i`` (both traced values).

    skrl's stochastic mixins draw ``fold_in(self._<m>_key, self._<m>_i)`` after incrementing the
    counter in Python, which under jit would freeze one key into the compiled program (and the
    seed into its cache key: every seed would compile anew). Here the key and the counter are the
    traced ``key`` and ``i - 1`` for the call, and are put back after it. Without ``i`` only the
    key is swapped: the counter then advances once when the program is traced, as it does when
    skrl's own update is traced (the trainer's runs keep the key sequence they were measured with).
    """

    def __init__(self, model, key, i=None):
        self.model, self.values = model, {}
        prefix = next((p for p in ("_c", "_g", "_mc") if hasattr(model, f"{p}_i")), None)
        if prefix:
            self.values = {f"{prefix}_key": key} if i is None else {f"{prefix}_key": key, f"{prefix}_i": i - 1}

    def __enter__(self):
        self.saved = {name: getattr(self.model, name) for name in self.values}
        for name, value in self.values.items():
            setattr(self.model, name, value)

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            setattr(self.model, name, value)


class FusedPPO(PPO):
    """skrl's PPO (same configuration, models, optimisers and checkpointable state), compiled."""

    def init(self, *, trainer_cfg=None) -> None:
        super().init(trainer_cfg=trainer_cfg)
        bad = unsupported(self.cfg, self.cfg.rollouts * self.memory.num_envs)
        if bad:
            raise SystemExit(f"train.py: the JAX trainer does not implement {', '.join(bad)}")
        self._steps: list = []
        prefix = next((p for p in ("_c", "_g", "_mc") if hasattr(self.policy, f"{p}_i")), None)
        self._counter, self._key = (f"{prefix}_i", getattr(self.policy, f"{prefix}_key")) if prefix else (None, None)
        if self._key is None:
            self._key = jax.random.PRNGKey(0)  # a model without draws: any key
        self._act = jax.jit(self._act_fn)
        self._update = jax.pmap(self._update_fn, axis_name=AXIS)

    # -- interaction -------------------------------------------------------------------------------
    def _act_fn(self, policy_params, value_params, observations, key, i):
        inputs = {"observations": observations, "states": None}
        with _StepKey(self.policy, key, i):
            actions, outputs = self.policy.act(dict(inputs), role="policy", params=policy_params)
        values, _ = self.value.act(dict(inputs), role="value", params=value_params)
        return actions, outputs["log_prob"], values, outputs

    def act(self, observations, states, *, timestep: int, timesteps: int):
        i = 0
        if self._counter:  # the model's own call counter, advanced as its act would advance it
            i = getattr(self.policy, self._counter) + 1
            setattr(self.policy, self._counter, i)
        actions, log_prob, values, outputs = self._act(
            self.policy.state_dict.params, self.value.state_dict.params, observations, self._key, np.int32(i)
        )
        self._current_log_prob = log_prob
        self._current_values = values
        return actions, outputs

    def record_transition(self, *, observations, actions, rewards, next_observations, terminated, truncated, **_):
        self._current_next_observations = next_observations
        self._steps.append(
            (observations, actions, rewards, terminated, truncated, self._current_log_prob, self._current_values)
        )

    # -- update ------------------------------------------------------------------------------------
    def _mean_over_ranks(self, grad):
        flat, unravel = ravel_pytree(grad)
        return unravel(jax.lax.psum(flat, AXIS) / config.jax.world_size)

    def _update_fn(self, policy_sd, value_sd, policy_opt, value_opt, batch, last_obs, perms, lr):
        # the policy's act draws a key it does not use here (the actions are given): a fixed one, so
        # that the program, and its entry in JAX's compilation cache, is the same for every seed (a
        # traced one would be captured by skrl's jitted _update_policy, whose cache outlives this trace)
        with _StepKey(self.policy, UNUSED_KEY):
            return self._update_body(policy_sd, value_sd, policy_opt, value_opt, batch, last_obs, perms, lr)

    def _update_body(self, policy_sd, value_sd, policy_opt, value_opt, batch, last_obs, perms, lr):
        cfg = self.cfg
        last_values, _ = self.value.act(
            {"observations": last_obs, "states": None}, role="value", params=value_sd.params
        )
        returns, advantages = skrl_ppo._compute_gae(
            rewards=batch["rewards"],
            terminated=batch["terminated"],
            truncated=batch["truncated"],
            values=batch["values"],
            last_values=last_values,
            discount_factor=cfg.discount_factor,
            lambda_coefficient=cfg.gae_lambda,
            time_limit_bootstrap=cfg.time_limit_bootstrap,
        )
        flat = {
            name: x.reshape(-1, x.shape[-1])
            for name, x in {
                "observations": batch["observations"],
                "actions": batch["actions"],
                "log_prob": batch["log_prob"],
                "values": batch["values"],
                "returns": returns,
                "advantages": advantages,
            }.items()
        }
        mini = cfg.mini_batches

        def minibatch(carry, data):
            policy_sd, value_sd, policy_opt, value_opt = carry
            inputs = {"observations": data["observations"], "states": None}
            grad, policy_loss, entropy_loss, _kl, stddev = skrl_ppo._update_policy(
                self.policy.act,
                policy_sd,
                {**inputs, "taken_actions": data["actions"]},
                data["log_prob"],
                data["advantages"],
                cfg.ratio_clip,
                self.policy.get_entropy,
                cfg.entropy_loss_scale,
            )
            value_grad, value_loss = skrl_ppo._update_value(
                self.value.act,
                value_sd,
                inputs,
                data["values"],
                data["returns"],
                cfg.value_loss_scale,
                cfg.value_clip > 0,
                cfg.value_clip,
            )
            # skrl reduces the policy's gradient, steps the policy, then computes and reduces the value's;
            # the value loss does not read the policy's parameters, so both go in one all-reduce
            grad, value_grad = self._mean_over_ranks((grad, value_grad))
            state, policy_sd = skrl_adam._step_with_scale(
                policy_opt.transformation, grad, policy_opt.state, policy_sd, -lr[0]
            )
            policy_opt = policy_opt.replace(state=state)
            state, value_sd = skrl_adam._step_with_scale(
                value_opt.transformation, value_grad, value_opt.state, value_sd, -lr[1]
            )
            value_opt = value_opt.replace(state=state)
            losses = jnp.stack([policy_loss, value_loss, jnp.asarray(entropy_loss, jnp.float32)])
            return (policy_sd, value_sd, policy_opt, value_opt), (losses, jnp.mean(stddev))

        def epoch(carry, perm):
            shuffled = {k: v[perm].reshape(mini, -1, v.shape[-1]) for k, v in flat.items()}
            return jax.lax.scan(minibatch, carry, shuffled)

        carry, (losses, stddev) = jax.lax.scan(epoch, (policy_sd, value_sd, policy_opt, value_opt), perms)
        return carry, losses.reshape(-1, 3).mean(axis=0), stddev[-1, -1]

    def update(self, *, timestep: int, timesteps: int) -> None:
        # The arrays are gathered, given their leading axis of one and taken back from it on the host
        # (numpy: the same values, no arithmetic): each eager jnp operation would be a program of its
        # own per shape (39 of the 88 a rank had), traced, compiled or loaded from JAX's cache again by
        # every process, a restarted one's first iteration included.
        steps, self._steps = self._steps, []
        names = ("observations", "actions", "rewards", "terminated", "truncated", "log_prob", "values")
        batch = {name: np.stack(column) for name, column in zip(names, zip(*steps))}
        batch["actions"] = batch["actions"].astype(np.float32)  # what skrl's memory stores
        size = batch["rewards"].shape[0] * batch["rewards"].shape[1]
        # skrl's RandomMemory.sample: one permutation of the whole rollout per epoch, numpy's generator
        perms = np.stack([np.random.permutation(size) for _ in range(self.cfg.learning_epochs)]).astype(np.int32)
        lr = np.asarray([self.policy_learning_rate, self.value_learning_rate], np.float32)
        one = functools.partial(jax.tree.map, lambda x: np.asarray(x)[None])
        (policy_sd, value_sd, policy_opt, value_opt), losses, stddev = self._update(
            one(self.policy.state_dict),
            one(self.value.state_dict),
            one(self.policy_optimizer),
            one(self.value_optimizer),
            one(batch),
            self._current_next_observations[None],
            perms[None],
            lr[None],
        )
        mine = functools.partial(jax.tree.map, lambda x: jax.device_put(np.asarray(x)[0], self.device))
        self.policy.state_dict, self.value.state_dict = mine(policy_sd), mine(value_sd)
        self.policy_optimizer, self.value_optimizer = mine(policy_opt), mine(value_opt)
        policy_loss, value_loss, entropy_loss = (float(x) for x in np.asarray(losses)[0])
        self.track_data("Loss / Policy loss", policy_loss)
        self.track_data("Loss / Value loss", value_loss)
        if self.cfg.entropy_loss_scale:
            self.track_data("Loss / Entropy loss", entropy_loss)
        self.track_data("Policy / Standard deviation", float(np.asarray(stddev)[0]))
        if self.policy_scheduler:
            self.track_data("Learning / Policy learning rate", self.policy_learning_rate)
        if self.value_scheduler:
            self.track_data("Learning / Value learning rate", self.value_learning_rate)

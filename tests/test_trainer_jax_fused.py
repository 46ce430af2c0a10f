"""The bundled JAX trainer's compiled PPO (examples/trainers/trainer_fused.py) is skrl's PPO.

``FusedPPO`` runs a rollout step as one XLA call and skrl's whole update (GAE, epochs, mini-batches,
gradient mean, Adam) as one program; the claim is that it computes what skrl's own ``PPO`` computes
from the same models, configuration and generator states. Checked in lock step on the real task:
every sampled action equal, and the parameters and optimiser states after each update equal to
float rounding, for a discrete task (CartPole, one mini-batch) and a continuous one (Pendulum, two
shuffled mini-batches), plus the settings it refuses instead of ignoring.
"""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

LOCKSTEP = """
import functools, sys
sys.path.insert(0, sys.argv[1])
import gymnasium, jax, numpy as np, yaml
from skrl import config
from skrl.agents.jax.ppo import PPO, PPO_CFG
from skrl.memories.jax import RandomMemory
import trainer_jax
from trainer_env import make_vec_env, env_seeds
from trainer_fused import FusedPPO
from trainer_ppo import build_agent, for_framework

def lockstep(task, iterations):
    hp = for_framework(yaml.safe_load(open(f"{sys.argv[1]}/../agents/{task}.yaml")), "jax")
    env = make_vec_env(task, 4)
    discrete = isinstance(env.single_action_space, gymnasium.spaces.Discrete)
    policy_cls = trainer_jax.CategoricalPolicy if discrete else trainer_jax.GaussianPolicy
    device = jax.devices("cpu")[0]

    def agent(cls):
        config.jax.key = 7
        obs_space, act_space = env.single_observation_space, env.single_action_space
        spaces = dict(observation_space=obs_space, action_space=act_space, device=device)
        policy = trainer_jax._configured(policy_cls, hp["models"])(**spaces)
        value = trainer_jax._configured(trainer_jax.Value, hp["models"])(**spaces)
        policy.init_state_dict(role="policy")
        value.init_state_dict(role="value")
        models = {"policy": policy, "value": value}
        return build_agent(cls, PPO_CFG, RandomMemory, models, dict(hp["agent"], rollouts=16), 4, device,
                           obs_space, act_space,
                           learning_rate_scheduler=trainer_jax._UnitSchedule)

    stock, fused = agent(PPO), agent(FusedPPO)
    for name in ("policy", "value"):  # the same start, whatever the initialisers draw
        getattr(fused, name).state_dict = getattr(stock, name).state_dict
    obs, _ = env.reset(seed=env_seeds(3, 4))
    worst, actions_equal, t = 0.0, True, 0
    counter = "_c_i" if discrete else "_g_i"
    for iteration in range(iterations):
        # skrl's act advances the model's key counter also when XLA traces the update (a side effect at
        # trace time, once per compilation: the stock agent compiles its pieces more often): same start
        setattr(fused.policy, counter, getattr(stock.policy, counter))
        for step in range(16):
            o = np.asarray(obs, np.float32)
            a_stock, _ = stock.act(jax.numpy.asarray(o), None, timestep=t, timesteps=10**6)
            a_fused, _ = fused.act(o, None, timestep=t, timesteps=10**6)
            same = np.array_equal if discrete else functools.partial(np.allclose, rtol=1e-4, atol=1e-5)
            actions_equal &= bool(same(np.asarray(a_stock), np.asarray(a_fused)))
            a = np.asarray(a_stock)
            obs, rew, term, trunc, _ = env.step(a.reshape(-1).astype(np.int64) if discrete else a)
            col = lambda x, dtype: np.asarray(x, dtype).reshape(-1, 1)
            rec = dict(rewards=col(rew, np.float32) * 0.1, next_observations=np.asarray(obs, np.float32),
                       terminated=col(term, np.int8), truncated=col(trunc, np.int8),
                       states=None, next_states=None, infos={}, timestep=t, timesteps=10**6)
            on_device = {k: jax.numpy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in rec.items()}
            stock.record_transition(observations=jax.numpy.asarray(o), actions=a_stock, **on_device)
            fused.record_transition(observations=o, actions=a, **rec)
            for agent_, seed in ((stock, 100 + t), (fused, 100 + t)):  # the same shuffles (numpy's generator)
                np.random.seed(seed)
                agent_.post_interaction(timestep=t, timesteps=10**6)
            t += 1
        pairs = [(stock.policy.state_dict.params, fused.policy.state_dict.params),
                 (stock.value.state_dict.params, fused.value.state_dict.params),
                 (stock.policy_optimizer.state, fused.policy_optimizer.state),
                 (stock.value_optimizer.state, fused.value_optimizer.state)]
        for x, y in pairs:
            for u, v in zip(jax.tree.leaves(x), jax.tree.leaves(y)):
                u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
                worst = max(worst, float(np.max(np.abs(u - v) / (np.abs(u) + 1e-3))) if u.size else 0.0)
    moved = float(np.max(np.abs(jax.flatten_util.ravel_pytree(fused.policy.state_dict.params)[0])))
    print("RESULT", task, actions_equal, worst, sorted(stock.tracking_data) == sorted(fused.tracking_data), moved)


for task in sys.argv[2:]:
    lockstep(task, 2)
"""


def _probe(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "examples" / "trainers"), *args],
        capture_output=True,
        text=True,
        timeout=900,  # a few seconds of work; minutes when the machine is shared
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


@pytest.mark.timeout(900)
def test_fused_ppo_computes_what_skrls_ppo_computes():
    r = _probe(LOCKSTEP, "CartPole-v1", "Pendulum-v1")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT")]
    assert len(lines) == 2, r.stdout[-3000:]
    for line in lines:
        _, _task, actions_equal, worst, same_stats, moved = line.split()
        # the same key per step as skrl's act: the same actions (continuous: to float rounding)
        assert actions_equal == "True", line
        assert float(worst) < 1e-4, line  # parameters and Adam states after 2 updates (XLA may sum in another order)
        assert same_stats == "True", line  # the same tracked losses (pop_stats reads them)
        assert float(moved) > 0.0, line


REFUSED = """
import sys
sys.path.insert(0, sys.argv[1])
from skrl.agents.jax.ppo import PPO_CFG
from trainer_fused import unsupported
print(unsupported(PPO_CFG(kl_threshold=0.02, mini_batches=3, time_limit_bootstrap=True), 64 * 8))
print(unsupported(PPO_CFG(mini_batches=4), 64 * 8))
"""


def test_fused_ppo_names_the_settings_it_does_not_implement():
    r = _probe(REFUSED)
    assert r.returncode == 0, r.stderr[-3000:]
    refused, accepted = r.stdout.strip().splitlines()[-2:]
    assert "kl_threshold" in refused and "time_limit_bootstrap" in refused and "mini_batches=3" in refused, refused
    assert accepted == "[]", accepted


ONE_PROGRAM = """
import sys
sys.path.insert(0, sys.argv[1])
import jax, jax.monitoring, numpy as np, yaml
from skrl import config
from skrl.agents.jax.ppo import PPO_CFG
from skrl.memories.jax import RandomMemory
import trainer_jax
from trainer_env import make_vec_env, env_seeds
from trainer_fused import FusedPPO
from trainer_ppo import build_agent, for_framework

compiled = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: compiled.append(event) if event == "/jax/core/compile/backend_compile_duration" else None
)
hp = for_framework(yaml.safe_load(open(f"{sys.argv[1]}/../agents/CartPole-v1.yaml")), "jax")
env = make_vec_env("CartPole-v1", 4)
device = jax.devices("cpu")[0]
config.jax.key = 7
spaces = dict(observation_space=env.single_observation_space, action_space=env.single_action_space, device=device)
policy = trainer_jax._configured(trainer_jax.CategoricalPolicy, hp["models"])(**spaces)
value = trainer_jax._configured(trainer_jax.Value, hp["models"])(**spaces)
policy.init_state_dict(role="policy")
value.init_state_dict(role="value")
agent = build_agent(FusedPPO, PPO_CFG, RandomMemory, {"policy": policy, "value": value},
                    dict(hp["agent"], rollouts=16), 4, device, env.single_observation_space,
                    env.single_action_space, learning_rate_scheduler=trainer_jax._UnitSchedule)
obs, _ = env.reset(seed=env_seeds(3, 4))
for t in range(16):
    o = np.asarray(obs, np.float32)
    a = np.asarray(agent.act(o, None, timestep=t, timesteps=10**6)[0])
    obs, rew, term, trunc, _ = env.step(a.reshape(-1).astype(np.int64))
    col = lambda x, dtype: np.asarray(x, dtype).reshape(-1, 1)
    agent.record_transition(observations=o, actions=a, rewards=col(rew, np.float32),
                            next_observations=np.asarray(obs, np.float32), terminated=col(term, np.int8),
                            truncated=col(trunc, np.int8), states=None, next_states=None, infos={},
                            timestep=t, timesteps=10**6)
    before = len(compiled)
    agent.post_interaction(timestep=t, timesteps=10**6)  # the update after the last step
print("UPDATE_COMPILES", len(compiled) - before)
"""


@pytest.mark.timeout(900)
def test_the_fused_update_compiles_one_program():
    """The update is one XLA program; its batch is gathered and its results taken apart on the host.
    Each eager jnp operation around it (a stack, x[None], x[0] per leaf) was a program of its own (31
    in the first update), which every process traced and compiled, or loaded from JAX's cache, again:
    a restarted JAX rank's first iteration too (docs/recovery.md)."""
    r = _probe(ONE_PROGRAM)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "UPDATE_COMPILES 1" in r.stdout, r.stdout[-3000:]


COMPILED_INIT = """
import sys
sys.path.insert(0, sys.argv[1])
import gymnasium, jax, jax.monitoring, numpy as np
from skrl import config
import trainer_jax

lowered = []
LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
jax.monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: lowered.append(event) if event == LOWERED else None
)
device = jax.devices("cpu")[0]
discrete = gymnasium.spaces.Discrete(2), trainer_jax.CategoricalPolicy
continuous = gymnasium.spaces.Box(-2.0, 2.0, (1,)), trainer_jax.GaussianPolicy
for action_space, policy_cls in (discrete, continuous):
    for cls, role in ((policy_cls, "policy"), (trainer_jax.Value, "value")):
        spaces = dict(observation_space=gymnasium.spaces.Box(-1.0, 1.0, (4,)), action_space=action_space, device=device)
        model = trainer_jax._configured(cls, {"hidden": [32, 16]})
        config.jax.key = 7
        compiled = model(**spaces)
        before = len(lowered)
        trainer_jax.init_state_dict(compiled, role)  # first: no program of it lowered before
        programs = len(lowered) - before
        config.jax.key = 7
        eager = model(**spaces)
        before = len(lowered)
        eager.init_state_dict(role=role)  # skrl's own
        eagerly = len(lowered) - before
        pairs = zip(jax.tree.leaves(eager.state_dict.params), jax.tree.leaves(compiled.state_dict.params))
        same = all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in pairs)
        print("INIT", cls.__name__, same, programs, eagerly)
"""


@pytest.mark.timeout(900)
def test_the_models_are_initialised_by_one_program_each_with_skrls_values():
    """skrl initialises a model eagerly: every operation (each layer's draws, scaled, truncated) a
    program of its own, traced, lowered and loaded from the compilation cache one by one at every
    start-up, a restarted rank's too (docs/recovery.md). The trainer compiles the same arithmetic as
    one program per model: the same parameters, bit for bit."""
    r = _probe(COMPILED_INIT)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line.split() for line in r.stdout.splitlines() if line.startswith("INIT ")]
    assert [(name, same) for _, name, same, _, _ in lines] == [
        ("CategoricalPolicy", "True"),
        ("Value", "True"),
        ("GaussianPolicy", "True"),
        ("Value", "True"),
    ], r.stdout
    assert all(programs == "1" for *_, programs, _ in lines), r.stdout
    print("programs of skrl's eager initialisations:", [eagerly for *_, eagerly in lines])

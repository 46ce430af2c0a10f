"""``config.yaml`` (launcher/config/dump.py) is byte for byte what OmegaConf writes of the masked typed
config, over the shipped configs, presets, profiles, trackers, secrets and swept values; the fast path
is the one taken for them (else the comparison would compare OmegaConf with itself), and a value
OmegaConf would convert takes OmegaConf's path."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from launcher import secrets
from launcher.config import dump
from launcher.config.compose import compose

CONFIGS = [
    [],
    ["presets=[debug]"],
    ["presets=[debug]", "seed=7", "run_name=${task}_x"],
    ["launcher=skrl_jax"],
    ["launcher=multinode", "launcher.nnodes=2", "launcher.node_rank=1", "launcher.master_addr=10.0.0.1"],
    ["launcher=slurm"],
    ["launcher=k8s"],
    ["submit=slurm", "slurm.nodes=2", "+slurm.extra.hold=true", "slurm.time=0:05:00"],
    ["submit=ray", "+ray.runtime_env.env_vars.HF_TOKEN=abc123x", "+ray.runtime_env.env_vars.PLAIN=1"],
    [
        "+worker_env.HF_TOKEN=s3cr3t-value",
        "+worker_env.FOO='true'",
        "+worker_env.BAR='1.5'",
        "notify.url=https://h.x/T",
    ],
    ["tracker=wandb"],
    ["tracker=mlflow"],
    ["profile=examples", "task=Pendulum-v1"],
    ["++launcher.grace_period=7.5", "sweep.parallel=2", "sweep.fail_fast=true"],
    ["container=isaaclab"],
    ["run_name='yes'", "launcher.hang_timeout=null", "task='on'"],
]


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: " ".join(o) or "defaults")
def test_config_yaml_is_what_omegaconf_writes(overrides):
    cfg = compose(overrides)
    masked = secrets.mask_config(cfg)
    dump._dataclass(masked)  # the fast path takes it (raises _Slow otherwise)
    expected = OmegaConf.to_yaml(OmegaConf.structured(masked))
    assert dump.config_yaml(cfg) == expected
    assert dump.config_yaml(cfg) == expected  # again, from the kept texts
    assert "s3cr3t-value" not in expected and "abc123x" not in expected


def test_a_value_omegaconf_converts_takes_its_path():
    cfg = compose(["presets=[debug]"])
    cfg.launcher.grace_period = 5  # an int in a float field: OmegaConf writes 5.0
    cfg.worker_env["N"] = "x"
    with pytest.raises(dump._Slow):
        dump._dataclass(cfg)
    text = dump.config_yaml(cfg)
    assert text == OmegaConf.to_yaml(OmegaConf.structured(secrets.mask_config(cfg)))
    assert "grace_period: 5.0" in text

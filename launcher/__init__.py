"""train_multigpu: configuration-driven launcher for distributed RL training."""

__version__ = "0.1.0"

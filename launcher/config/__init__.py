"""What the user asked for: the command line's grammar, the typed schema, Hydra composition and the
cluster profiles.

- ``grammar``: argv -> Hydra flags, overrides and the training script's arguments (both grammars).
- ``schema``: the typed dataclasses Hydra validates against (keys, types, defaults).
- ``compose``: composing the config (tests, tools) and turning it into the typed ``TrainConfig``.
- ``profiles``: where profiles are found (the search path) and ``save_profile=``.
- ``dump``: ``config.yaml``, the masked typed config as OmegaConf writes it (every back end's record).

Imports only the package's leaves (errors, paths, secrets); never ``run/``, ``sweep/``, ``slurm/``.
A change to "how a profile is found" belongs in ``profiles.py``.
"""

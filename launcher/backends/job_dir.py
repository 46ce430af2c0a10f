"""The run directory of a submitted job (SLURM, Ray, Kubernetes, ...): ONE directory for the whole
job, never a node's -- its nodes' launchers record into ``node<R>/`` inside it (``run_dir=`` given to
them). The session names it (:attr:`~launcher.backends.base.Launch.run_dir`: a sweep point's is
Hydra's, a single launch's ``run_dir=`` or ``<run_root>/<stamp>[_<run_name>]``); ``dryrun`` plans it
(:meth:`JobDir.of`), ``submit`` makes it (:meth:`JobDir.create`). Nothing here imports Hydra."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import record
from ..errors import UserError

if TYPE_CHECKING:
    from ..config.schema import TrainConfig
    from .base import Launch


def planned(cfg: TrainConfig) -> Path:
    """Where a single launch's job directory will be: ``run_dir=`` as given, else a new one under
    ``run_root`` (named now; :meth:`JobDir.create` makes it, or ``<name>-<N>`` if taken since)."""
    if cfg.run_dir is not None:
        return Path(cfg.run_dir).resolve()
    return Path(os.path.abspath(cfg.run_root)) / record.run_dir_name(cfg.run_name)


@dataclass(frozen=True)
class JobDir:
    """A request's run directory, as ``submit`` will make it."""

    path: str  # as planned (Request.run_dir)
    given: bool  # a sweep point's (Hydra's) or run_dir=: made if missing and used as it is
    key: str = "run_root"  # what the user named it with, for the error
    value: str | None = None

    @classmethod
    def of(cls, launch: Launch) -> JobDir:
        cfg = launch.cfg
        given = launch.job is not None or cfg.run_dir is not None
        key, value = ("run_dir", cfg.run_dir) if cfg.run_dir is not None else ("run_root", cfg.run_root)
        return cls(str(launch.run_dir), given, key, None if value is None else str(value))

    def create(self) -> Path:
        """The directory, made now: a given one as it is (it may exist), else the planned one, never
        one that exists (``<name>-<N>`` when taken since the dry run: the request is then rebuilt for it)."""
        path = Path(self.path)
        try:
            if self.given:
                path.mkdir(parents=True, exist_ok=True)
                return path
            return record.fresh_dir(path)
        except OSError as err:
            raise UserError(
                self.key,
                self.value,
                f"cannot create the run directory: {err.strerror or err}",
                "choose a directory you can write",
            ) from None

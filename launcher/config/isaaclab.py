"""Where Isaac Lab is: ``$ISAACLAB_PATH``, else the source checkout the importable ``isaaclab`` package
lives in. :mod:`.compose` registers :func:`isaaclab_root` as the ``${tmg_isaaclab_root:}`` resolver
(profile=isaaclab) and chooses the isaaclab profile when a checkout is at hand; :mod:`.profiles` wraps
the same resolver while it type-checks a profile to be saved."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

ISAACLAB_ENV = "ISAACLAB_PATH"


@dataclasses.dataclass(frozen=True)
class IsaacLabCheckout:
    root: str  # the checkout: <root>/scripts/reinforcement_learning/train.py
    how: str  # ISAACLAB_ENV, or how it was found


# an Isaac Lab source checkout holds its package at <root>/source/isaaclab/isaaclab
ISAACLAB_TRAIN = ("scripts", "reinforcement_learning", "train.py")
_CHECKOUT_DEPTH = 4  # package directory -> checkout root: at most this many levels up


def isaaclab_checkout(env: Mapping[str, str]) -> IsaacLabCheckout | None:
    """Isaac Lab's checkout: ``$ISAACLAB_PATH``, else the source checkout that the importable
    ``isaaclab`` package lives in (Isaac Lab's uv workflow does not always export ISAACLAB_PATH).
    The package is located with ``importlib.util.find_spec``, never imported (start-up budget); a
    package without a checkout around it (a wheel in site-packages) finds nothing."""
    if env.get(ISAACLAB_ENV):
        return IsaacLabCheckout(env[ISAACLAB_ENV], ISAACLAB_ENV)
    import importlib.util

    try:
        spec = importlib.util.find_spec("isaaclab")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        package = Path(location).resolve()
        for root in list(package.parents)[:_CHECKOUT_DEPTH]:
            if root.joinpath(*ISAACLAB_TRAIN).is_file():
                how = f"ISAACLAB_PATH unset; found through the isaaclab package at {package}"
                return IsaacLabCheckout(str(root).rstrip(os.sep) or os.sep, how)
    return None


def isaaclab_root() -> str:
    """``${tmg_isaaclab_root:}`` (profile=isaaclab): $ISAACLAB_PATH, else the checkout of the importable
    isaaclab package; neither: an error naming both."""
    from omegaconf.errors import InterpolationResolutionError

    checkout = isaaclab_checkout(os.environ)
    if checkout is None:
        raise InterpolationResolutionError(
            f"Environment variable '{ISAACLAB_ENV}' not found, "
            "and no importable isaaclab package lives in an Isaac Lab checkout"
        )
    return checkout.root

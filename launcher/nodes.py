"""A job's node count on a back end: ``launcher.nnodes``, the one spelling on every back end, and a back
end's older key for it (``k8s.nodes``, ``slurm.nodes``) kept as an alias that must agree (PURE).

Either key is *set* when it was typed or holds something other than its default (1): set alone, it is
the job's node count; both set to different counts is one :class:`UserError` naming both.
"""

from __future__ import annotations

import re

from .errors import UserError

NNODES = "launcher.nnodes"


def node_range(value: object, jax: bool, key: str = NNODES) -> tuple[int, int]:
    """``N`` or (torchrun only) ``MIN:MAX``, spaces around the numbers allowed: (MIN, MAX). The one
    rule for a node count written as text; :func:`spelled` writes it back as torchrun takes it.

    >>> node_range("2", jax=False), node_range(" 1 : 4", jax=False)
    ((2, 2), (1, 4))
    """
    allowed = "an integer >= 1" + ("" if jax else ", or MIN:MAX with 1 <= MIN <= MAX")
    parts = str(value).split(":")
    if len(parts) == 2 and jax:
        raise UserError(key, value, "an integer >= 1 (elastic MIN:MAX is torchrun only)")
    if len(parts) > 2 or not all(re.fullmatch(r"[0-9]+", p.strip()) for p in parts):
        raise UserError(key, value, allowed)
    low, high = (int(parts[0]), int(parts[-1]))
    if low < 1 or high < low:
        raise UserError(key, value, allowed)
    return low, high


def spelled(value: object, jax: bool = False) -> str:
    """The node count as torchrun takes it: ``N`` or ``MIN:MAX``, without spaces.

    >>> spelled(" 1 : 2"), spelled(" 3"), spelled("2:2")
    ('1:2', '3', '2:2')
    """
    low, high = node_range(value, jax)
    return f"{low}:{high}" if ":" in str(value) else str(low)


def job_nodes(nnodes: object, nnodes_typed: bool, alias_key: str, alias: int, alias_typed: bool, most: int) -> int:
    """The job's node count, 1 to ``most``.

    >>> job_nodes("2", True, "k8s.nodes", 1, False, 5000), job_nodes("1", False, "k8s.nodes", 3, True, 5000)
    (2, 3)
    >>> job_nodes("3", True, "k8s.nodes", 2, True, 5000)
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: launcher.nnodes=3: k8s.nodes=2 says otherwise: k8s.nodes is the old spelling of launcher.nnodes, the job's node count (set one of them, or both to the same count)
    """  # noqa: E501
    text = "" if nnodes is None else str(nnodes).strip()
    own_set = text != "" and (nnodes_typed or text != "1")
    alias_set = alias_typed or alias != 1
    if own_set:
        if not re.fullmatch(r"[0-9]+", text) or not 1 <= int(text) <= most:
            raise UserError(NNODES, nnodes, f"a node count from 1 to {most}")
        if alias_set and alias != int(text):
            raise UserError(
                NNODES,
                nnodes,
                f"{alias_key}={alias} says otherwise: {alias_key} is the old spelling of {NNODES}, "
                "the job's node count",
                "set one of them, or both to the same count",
            )
        return int(text)
    if not 1 <= alias <= most:
        raise UserError(alias_key, alias, f"a node count from 1 to {most}")
    return alias


def aliased(key: str, value: object, alias_key: str, alias: object, what: str) -> object:
    """One key and its old spelling, by the rule :func:`job_nodes` applies to node counts: either set
    alone is the value; both set (not None) to different values is one :class:`UserError` naming both.

    >>> aliased("container.image", None, "k8s.image", "img", "the pods' image")
    'img'
    >>> aliased("container.image", "a", "k8s.image", "b", "the pods' image")
    Traceback (most recent call last):
    ...
    launcher.errors.UserError: container.image=a: k8s.image=b says otherwise: k8s.image is the old spelling of container.image, the pods' image (set one of them, or both to the same value)
    """  # noqa: E501
    if value is None:
        return alias
    if alias is not None and alias != value:
        raise UserError(
            key,
            value,
            f"{alias_key}={alias} says otherwise: {alias_key} is the old spelling of {key}, {what}",
            "set one of them, or both to the same value",
        )
    return value

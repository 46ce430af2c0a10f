"""Start-up cost of the launcher: ``train_multigpu dry_run=true`` (the installed console script, run
from a folder of its own) against a bare Hydra app composing a config of the same shape, both
measured in this run, alternating, as separate processes. Prints medians of wall and CPU seconds,
their ratios and the spread of the per-pair ratios.

    python benchmarks/startup.py [--runs 15] [--callgrind 1]

Two bare apps: ``schema`` (the default; a tiny ``@hydra.main`` app: the shipped config groups, the
structured schema registered in Hydra's ConfigStore as the launcher's own, a copy of
launcher/config/schema.py; its job prints the resolved config) and ``yaml`` (``--bare yaml``: the
same keys and values as plain YAML, no schema: the baseline the sweep benchmark uses). Both run
with byte code written and read (the warm-up run writes it), as an installed wheel's is: with
``PYTHONDONTWRITEBYTECODE=1`` (set on the shared VM) an editable checkout compiles the launcher's
modules from source at every start, about 40 ms (1.09x the bare app with the schema, load 3).
``--callgrind N`` also counts each side's instructions under ``valgrind --tool=callgrind`` (N runs
each, the median): steadier than any clock on a loaded machine. The first line printed is the load.

Target (issue 28): CPU ratio <= 1.10 against the bare app with the schema.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BARE_APP = """
import hydra
from omegaconf import OmegaConf
{schema}
for name in ("tmg_examples_dir", "tmg_docs_dir", "tmg_isaaclab_root"):
    OmegaConf.register_new_resolver(name, lambda: "examples")


@hydra.main(config_path="conf", config_name="train_multigpu", version_base="1.3")
def main(cfg):
    print(OmegaConf.to_yaml(cfg, resolve=True))


main()
"""

REGISTER_SCHEMA = """
from hydra.core.config_store import ConfigStore

from bare_schema import SCHEMA_NAME, TrainConfig

ConfigStore.instance().store(name=SCHEMA_NAME, node=TrainConfig)
"""


def bare_app(workdir: Path, schema: bool = False) -> Path:
    """The bare Hydra app in ``workdir`` (its ``conf/`` beside it). ``schema``: the shipped primary
    config as it is, its schema a copy of the launcher's (stdlib imports only); else the schema's keys
    and values as plain YAML in the primary config."""
    conf = workdir / "conf"
    shutil.copytree(ROOT / "conf", conf)
    primary = conf / "train_multigpu.yaml"
    if schema:
        shutil.copy(ROOT / "launcher" / "config" / "schema.py", workdir / "bare_schema.py")
    else:  # same groups, keys and values, as plain YAML instead of the typed schema
        from omegaconf import OmegaConf

        from launcher.config.schema import TrainConfig

        keys = OmegaConf.to_yaml(OmegaConf.to_container(OmegaConf.structured(TrainConfig), enum_to_str=True))
        text = primary.read_text()
        primary.write_text(
            text.replace("  - train_multigpu_schema\n", "").replace("\nhydra:\n", f"\n{keys}\nhydra:\n", 1)
        )
    app = workdir / "bare_app.py"
    app.write_text(BARE_APP.format(schema=REGISTER_SCHEMA if schema else ""))
    return app


def environment() -> dict[str, str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # both sides read byte code, as an installed wheel does
    return env


def timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=environment(), check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(argv: list[str], cwd: Path) -> int:
    """Instructions the process executes, counted by callgrind (its ``summary:`` line)."""
    out = cwd / "callgrind.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
        cwd=cwd,
        env=environment(),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    found = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
    out.unlink()
    assert found, "callgrind wrote no summary line"
    return int(found.group(1))


def spread(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--bare", choices=("schema", "yaml"), default="schema")
    parser.add_argument("--callgrind", type=int, default=0, metavar="N", help="also count instructions, N runs each")
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    script = Path(sys.executable).with_name("train_multigpu")
    if not script.exists():
        raise SystemExit(f"{script}: not installed (pip install -e . into this interpreter's environment)")
    with tempfile.TemporaryDirectory() as tmp:
        ours_dir, bare_dir = Path(tmp) / "ours", Path(tmp) / "bare"
        ours_dir.mkdir()
        bare_dir.mkdir()
        app = bare_app(bare_dir, schema=args.bare == "schema")
        ours_argv = [str(script), "dry_run=true"]
        bare_argv = [sys.executable, str(app), "dry_run=true"]
        timed(ours_argv, ours_dir), timed(bare_argv, bare_dir)  # warm the file cache, write the byte code
        ours, bare = [], []
        for _ in range(args.runs):
            ours.append(timed(ours_argv, ours_dir))
            bare.append(timed(bare_argv, bare_dir))
        if args.callgrind:
            ours_ir = [instructions(ours_argv, ours_dir) for _ in range(args.callgrind)]
            bare_ir = [instructions(bare_argv, bare_dir) for _ in range(args.callgrind)]
    print(f"bare Hydra app ({args.bare}), {args.runs} runs alternating with train_multigpu dry_run=true:")
    for i, kind in enumerate(("wall", "cpu")):
        o, b = statistics.median(r[i] for r in ours), statistics.median(r[i] for r in bare)
        pairs = [x[i] / y[i] for x, y in zip(ours, bare)]
        print(
            f"  {kind:4}  bare {b * 1000:7.1f} ms  train_multigpu {o * 1000:7.1f} ms  ratio {o / b:.3f}x "
            f"(per pair {spread(pairs)}, median {statistics.median(pairs):.3f})"
        )
    if args.callgrind:
        o, b = statistics.median(ours_ir), statistics.median(bare_ir)
        print(
            f"  instructions (callgrind, {args.callgrind} each)  bare {b / 1e9:.3f} G  "
            f"train_multigpu {o / 1e9:.3f} G  ratio {o / b:.3f}x"
        )
    print("target: cpu ratio <= 1.10x against the bare app with the schema")


if __name__ == "__main__":
    main()

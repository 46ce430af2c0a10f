"""Start-up cost of the launcher: ``train_multigpu ... dry_run=true`` against a bare Hydra app that
composes a config of the same shape (the shipped config groups, no schema, no checks, no plan),
both measured in this run, alternating, as separate processes. Prints medians and the ratio.

    python benchmarks/startup.py [--runs 15]

Target: ratio <= 1.3.
"""

from __future__ import annotations

import argparse
import os
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

OmegaConf.register_new_resolver("tmg_examples_dir", lambda: "examples")


@hydra.main(config_path="conf", config_name="train_multigpu", version_base="1.3")
def main(cfg):
    print(OmegaConf.to_yaml(cfg, resolve=True))


main()
"""


def bare_app(workdir: Path) -> Path:
    conf = workdir / "conf"
    shutil.copytree(ROOT / "conf", conf)
    primary = conf / "train_multigpu.yaml"
    # same groups, keys and values, as plain YAML instead of the typed schema
    from omegaconf import OmegaConf

    from launcher.config.schema import TrainConfig

    keys = OmegaConf.to_yaml(OmegaConf.to_container(OmegaConf.structured(TrainConfig), enum_to_str=True))
    text = (
        primary.read_text().replace("  - train_multigpu_schema\n", "").replace("\nhydra:\n", f"\n{keys}\nhydra:\n", 1)
    )
    primary.write_text(text)
    app = workdir / "bare_app.py"
    app.write_text(BARE_APP)
    return app


def timed(argv: list[str], cwd: Path) -> float:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        app = bare_app(workdir)
        ours_argv = [sys.executable, "-m", "launcher", "presets=debug", "seed=1", "dry_run=true"]
        bare_argv = [sys.executable, str(app), "presets=debug", "seed=1"]
        timed(ours_argv, workdir), timed(bare_argv, workdir)  # warm the file cache
        ours, bare = [], []
        for _ in range(args.runs):
            ours.append(timed(ours_argv, workdir))
            bare.append(timed(bare_argv, workdir))
    o, b = statistics.median(ours), statistics.median(bare)
    print(f"bare Hydra app     median {b * 1000:7.1f} ms over {args.runs} runs")
    print(f"train_multigpu dry median {o * 1000:7.1f} ms over {args.runs} runs")
    print(f"ratio {o / b:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()

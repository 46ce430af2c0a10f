"""A value of the wrong kind for a key, refused in one line before anything starts (exit 2, nothing
written), the same for every key of that kind: every list key takes ``key=[a,b]`` or one item
written bare; every integer key given ``MIN:MAX`` says which key takes a range. In process
(tests/inproc.py): dozens of command lines a second."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inproc import environment, run_main
from launcher.config import grammar
from launcher.config.compose import compose
from launcher.config.schema import keys_of_type

PREFIX = "train_multigpu: error: "
LIST_KEYS = keys_of_type(list)
INT_KEYS = keys_of_type(int)


class _NoProcess:
    def __init__(self, *args, **kwargs):
        raise AssertionError(f"a refused command line started a process: {args[0] if args else kwargs}")


def _snapshot(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(argv: list[str], tmp_path: Path) -> str:
    """Run ``argv`` (a real launch, not a dry run) in process; it must be refused: exit 2, one line
    on stderr, nothing on stdout, no file written, no process started. Returns the message."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    before = _snapshot(tmp_path)
    saved, subprocess.Popen = subprocess.Popen, _NoProcess
    try:
        result = run_main(argv, str(work), environment(str(home), HOME=str(home)))
    finally:
        subprocess.Popen = saved
    shown = f"argv: {argv}\nexit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert result.returncode == 2, shown
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX) and not result.stdout, shown
    assert _snapshot(tmp_path) == before, shown
    return lines[0][len(PREFIX) :]


def test_the_schema_has_list_and_int_keys():
    """The parametrized tests below cover every key of each kind: the schema is read, not a list."""
    assert {"restart.classes", "ssh.hosts", "ssh.options", "k8s.secret_env"} <= set(LIST_KEYS)
    assert {"slurm.nodes", "k8s.nodes", "restart.max", "seed"} <= set(INT_KEYS)


@pytest.mark.parametrize("key", LIST_KEYS)
def test_a_list_key_takes_one_item_bare(key):
    typed = grammar.parse([f"{key}=item-1"])
    cfg = compose(typed.overrides, typed.script_args)
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    assert node == ["item-1"]


@pytest.mark.parametrize("key", LIST_KEYS)
def test_a_list_key_given_no_list_is_one_line(key, tmp_path):
    message = refused([f"{key}="], tmp_path)
    assert message == f"{key}=: a list (write {key}=[a,b], or one item bare: {key}=a)"


@pytest.mark.parametrize("key", LIST_KEYS)
def test_a_list_key_given_a_comma_list_says_brackets(key, tmp_path):
    message = refused([f"{key}=a,b"], tmp_path)
    assert message == (
        f"{key}=a,b: a comma list is a sweep: one job per value "
        f"(a list is written in brackets: '{key}=[a,b]'; add -m to sweep)"
    )


@pytest.mark.parametrize("key", INT_KEYS)
def test_an_integer_key_given_a_range_names_the_key_that_takes_one(key, tmp_path):
    message = refused([f"{key}=1:2"], tmp_path)
    assert message == (
        f"{key}=1:2: an integer (MIN:MAX is taken by launcher.nnodes only: elastic torchrun across nodes, "
        "launcher=multinode)"
    )


@pytest.mark.parametrize("key", INT_KEYS)
def test_an_integer_key_given_a_word_is_one_line(key, tmp_path):
    assert refused([f"{key}=many"], tmp_path) == f"{key}=many: an integer"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["restart.classes=segfault"],
            "restart.classes=segfault: a failure class (hang, node-lost, node-failed, nccl, nccl-timeout, "
            "rendezvous, jax-init-timeout, follower, killed, exception, exit-code, usage, cuda-oom, oom-killed, "
            "illegal-memory-access, crash, torchrun, port-in-use), default or all "
            "(docs/recovery.md lists what each class means)",
        ),
        (["launcher.grace_period=soon"], "launcher.grace_period=soon: a number"),
        (["log_all_ranks=maybe"], "log_all_ranks=maybe: true or false"),
    ],
)
def test_values_of_the_wrong_kind(argv, message, tmp_path):
    assert refused(argv, tmp_path) == message


def test_a_bare_item_with_an_equals_sign_is_one_item():
    """``ssh.options=BatchMode=no`` is one option (Hydra reads '=' only quoted: the item is quoted)."""
    typed = grammar.parse(["ssh.options=ConnectionAttempts=3"])
    assert compose(typed.overrides).ssh.options == ["ConnectionAttempts=3"]


def test_restarts_with_no_class_are_refused(tmp_path):
    """restart.max=3 with an empty class list would never restart (the dry run said "up to 3 after ,")."""
    assert refused(["restart.max=3", "restart.classes=[]"], tmp_path) == (
        "restart.classes=[]: names no failure class, so restart.max=3 would never restart "
        "(restart.classes=default, a class or a list of them; or restart.max=0 for no restarts)"
    )


@pytest.mark.parametrize("typed, shown", [(" 1 : 2", "1:2"), ("1 :2", "1:2"), (" 2 ", "2")])
def test_a_node_count_with_spaces_reaches_torchrun_as_torchrun_takes_it(typed, shown):
    from conftest import build

    plan = build(["launcher=multinode", f"launcher.nnodes={typed}", "launcher.rdzv_endpoint=10.0.0.1:29400"])
    argv = plan.processes[0].argv
    assert plan.nnodes == shown
    assert argv[argv.index("--nnodes") + 1] == shown


def _run(argv: list[str], tmp_path: Path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    return run_main(argv, str(work), environment(str(home), HOME=str(home)))


@pytest.mark.parametrize("where", ["elsewhere/profile/p1.yaml", "p1.yaml", "plain"])
def test_a_saved_profile_is_selected_as_the_line_says(where, tmp_path):
    """save_profile=/abs/p1.yaml said "select it with profile=p1", which then was not found."""
    target = tmp_path / where if where.endswith(".yaml") else None
    saved = _run(["save_profile=" + (str(target) if target else "p1"), "num_envs=7"], tmp_path)
    assert saved.returncode == 0, saved.stderr
    line = saved.stdout.strip()
    written = line.split("profile written: ", 1)[1].split(" (", 1)[0]
    how = line.split(" (", 1)[1].rstrip(")")
    if where == "p1.yaml":
        assert how == (
            f"to select it, put it in a profile/ folder (e.g. {tmp_path / 'profile' / 'p1.yaml'}) "
            f"and add --config-dir {tmp_path} profile=p1"
        )
        (tmp_path / "profile").mkdir()
        Path(written).rename(tmp_path / "profile" / "p1.yaml")
        argv = ["--config-dir", str(tmp_path), "profile=p1"]
    elif where == "plain":
        assert how == "select it with profile=p1"
        argv = ["profile=p1"]
    else:
        assert how == f"select it with --config-dir {tmp_path / 'elsewhere'} profile=p1"
        argv = how.removeprefix("select it with ").split()
    selected = _run(["dry_run=true", *argv], tmp_path)
    assert selected.returncode == 0, selected.stderr
    assert "# profile: p1 " in selected.stdout and "--num_envs" in selected.stdout, selected.stdout


def test_device_cuda_without_a_gpu_is_the_documented_warning_in_a_dry_run(tmp_path):
    """docs/errors.md: device=cuda with no GPU is a dry run's warning (with a worker count to plan),
    named as device=cuda; with nproc_per_node=auto there is no count: an error naming device=cuda."""
    env = environment(str(tmp_path), HOME=str(tmp_path), CUDA_VISIBLE_DEVICES="")
    counted = run_main(["dry_run=true", "device=cuda", "launcher.nproc_per_node=2"], str(tmp_path), env)
    assert counted.returncode == 0, counted.stderr
    assert counted.stderr.splitlines() == [
        "train_multigpu: warning: device=cuda: no GPU is visible on this machine (from CUDA_VISIBLE_DEVICES='')"
        "; a real launch on this host refuses it"
    ]
    auto = run_main(["dry_run=true", "device=cuda"], str(tmp_path), env)
    assert auto.returncode == 2 and not auto.stdout
    assert auto.stderr == (
        "train_multigpu: error: device=cuda: no GPU is visible on this machine (from CUDA_VISIBLE_DEVICES=''; "
        "launcher.nproc_per_node=auto counts GPUs: give a number to see the plan in a dry run (a warning then), "
        "or device=auto / device=cpu)\n"
    )


def test_the_bundled_profile_lists_the_bundled_trainers_tasks():
    """profile.tasks of the examples profile is what the bundled trainer accepts (one agent file each)."""
    import sys

    from launcher import paths

    sys.path.insert(0, str(paths.examples_dir() / "trainers"))
    try:
        import trainer_args
    finally:
        sys.path.pop(0)
    assert compose([]).profile.tasks == trainer_args.available_tasks()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["task=Isaac-Cartpole-v0"],
            "task=Isaac-Cartpole-v0: profile=examples trains CartPole-v1, Pendulum-v1 only "
            "(an Isaac Lab task needs Isaac Lab: profile=isaaclab, docs/profiles.md)",
        ),
        (
            ["--task", "Cartpole-v1"],
            "task=Cartpole-v1: profile=examples trains CartPole-v1, Pendulum-v1 only "
            "(choose one of them, or script= for a trainer of your own)",
        ),
    ],
)
@pytest.mark.parametrize("dry", [True, False])
def test_a_task_the_bundled_trainer_does_not_know_is_refused_before_anything_starts(argv, message, dry, tmp_path):
    assert refused([*argv, *(["dry_run=true"] if dry else [])], tmp_path) == message


def test_a_script_of_ones_own_takes_any_task(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text("")
    result = _run(["dry_run=true", "task=Isaac-Cartpole-v0", f"script={script}"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--task=Isaac-Cartpole-v0" in result.stdout


@pytest.mark.parametrize(
    "where", ["foo", "head:8265", "http://:8265", "http://head:0", "http://head:x", "'http://h 1:8265'"]
)
@pytest.mark.parametrize("dry", [True, False])
def test_a_malformed_ray_address_is_refused_in_a_dry_run_too(where, dry, tmp_path):
    """A dry run connects to nothing, and still checks the address it was given (it took any before)."""
    argv = ["submit=ray", "launcher.nproc_per_node=1", f"ray.address={where}", *(["dry_run=true"] if dry else [])]
    message = refused(argv, tmp_path)
    assert message == (
        f"ray.address={where.strip(chr(39))}: the Ray dashboard's HTTP address, http://HOST:PORT or https://HOST:PORT "
        "(not a GCS address HOST:PORT, nor ray://) (e.g. ray.address=http://HEAD:8265 (`ray start --head` prints it))"
    )


def test_a_malformed_ray_address_variable_is_refused_in_a_dry_run(tmp_path):
    env = environment(str(tmp_path), HOME=str(tmp_path), RAY_ADDRESS="ray://head:10001")
    result = run_main(["submit=ray", "launcher.nproc_per_node=1", "dry_run=true"], str(tmp_path), env)
    assert result.returncode == 2 and not result.stdout, result.stderr
    assert result.stderr.startswith("train_multigpu: error: RAY_ADDRESS=ray://head:10001: the Ray dashboard's HTTP")


# -- launcher.local_nodes=true: each node its share of the host ------------------------------------
def _local(rank: int, nnodes: str = "2", *extra: str) -> list[str]:
    return [
        "launcher=multinode",
        f"launcher.nnodes={nnodes}",
        f"launcher.node_rank={rank}",
        "launcher.local_nodes=true",
        "launcher.rdzv_endpoint=127.0.0.1:29400",
        *extra,
    ]


@pytest.mark.parametrize("nnodes", ["2", "1:2"])
def test_local_nodes_split_the_cores_like_sweep_lanes(nnodes):
    from conftest import make_facts
    from launcher import checks
    from launcher.sweep import lanes

    facts = make_facts(cpus=8)
    shares = []
    for rank in (0, 1):
        typed = grammar.parse(_local(rank, nnodes, "device=cpu"))
        cfg = compose(typed.overrides)
        share = lanes.local_node_slot(cfg, facts, list(range(8)), checks.refuse_now)
        settled = checks.validate(cfg, lanes.node_facts(facts, share))
        shares.append(share.cpus)
        assert settled.nproc_per_node == 4  # auto: this node's cores, not the host's 8
    assert shares == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_local_nodes_split_the_gpus():
    from conftest import make_facts
    from launcher import checks
    from launcher.sweep import lanes

    facts = make_facts(gpus=4, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    cfg = compose(grammar.parse(_local(1)).overrides)
    share = lanes.local_node_slot(cfg, facts, [0, 1], checks.refuse_now)
    assert share.gpus == ("2", "3")
    assert checks.validate(cfg, lanes.node_facts(facts, share)).nproc_per_node == 2


def test_more_local_nodes_than_cores_is_refused():
    from conftest import make_facts
    from launcher import checks
    from launcher.errors import UserError
    from launcher.sweep import lanes

    cfg = compose(grammar.parse(_local(2, "3", "device=cpu")).overrides)
    with pytest.raises(UserError) as caught:
        lanes.local_node_slot(cfg, make_facts(cpus=2), [0, 1], checks.refuse_now)
    assert str(caught.value) == (
        "launcher.local_nodes=true: 3 nodes on this host share its 2 usable CPU cores: each node gets its own, "
        "at least one (fewer nodes, or the nodes on separate hosts)"
    )


def test_a_local_nodes_dry_run_shows_each_nodes_share(tmp_path):
    import os

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 usable CPU cores")
    half = len(cores) // 2
    env = environment(str(tmp_path), HOME=str(tmp_path), CUDA_VISIBLE_DEVICES="")
    result = run_main(["dry_run=true", *_local(1)], str(tmp_path), env)
    assert result.returncode == 0, result.stderr
    mine = ",".join(map(str, cores[half : 2 * half]))
    assert f"# local node 1's share of this host: CPU cores {mine} (the ranks pinned to them)" in result.stdout
    assert f"--nproc_per_node {half} " in result.stdout.splitlines()[-1]


@pytest.mark.parametrize("key", keys_of_type(dict))
def test_a_new_entry_of_a_free_form_map_needs_a_plus(key, tmp_path):
    """errors.md's and the tool's own hints said slurm.extra.export=ALL, which is refused without +."""
    assert refused([f"{key}.new_entry=1"], tmp_path) == (
        f"{key}.new_entry=1: a new entry of {key}, a free-form map (add it with +: +{key}.new_entry=1)"
    )

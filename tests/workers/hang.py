"""A rank for the hang watchdog's tests (tests/test_hang.py).

--mode torch     gloo all-reduce once per iteration, a heartbeat per iteration; rank --stuck sleeps
                 forever before the all-reduce of iteration --at (the others wait in all_reduce)
--mode jax       the same with a JAX cross-process sum (psum) over gloo CPU collectives
--mode silent    beats every 0.2 s for --seconds, prints nothing at all, exits 0
--mode mute      prints nothing, never beats, sleeps forever (stuck in start-up)
--mode mixed     rank 0 beats every 0.2 s and prints nothing; rank 1 prints every 0.2 s and never
                 beats; rank 2 (if any) prints one line and then nothing; for --seconds, then exit 0

Every rank writes ``<--pid_dir>/rank<R>-<pid>.pid`` first. Unknown arguments (--distributed) are ignored.

With TORCH_NCCL_DEBUG_INFO_PIPE_FILE set (a CUDA launch's), a torch rank plays the part of NCCL's flight
recorder, which a CPU (gloo) process group does not have: once its process group exists it does what
torch 2.13's ProcessGroupNCCL does (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp, DumpPipe): removes
and creates the named pipe ``<stem><RANK>.pipe``, opens it non-blocking for reading, looks at it about
once a second, and on a read writes its dump to ``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><RANK>`` (FlightRecorder.hpp,
DebugInfoWriter: the prefix and the rank).
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True)
parser.add_argument("--pid_dir", required=True)
parser.add_argument("--stuck", type=int, default=1)
parser.add_argument("--at", type=int, default=3)
parser.add_argument("--seconds", type=float, default=6.0)
args, _unknown = parser.parse_known_args()
rank = int(os.environ.get("RANK", os.environ.get("JAX_RANK", "0")))
PID_FILE = os.path.join(args.pid_dir, f"rank{rank}-{os.getpid()}.pid")
with open(PID_FILE + ".tmp", "w") as handle:  # whole or absent (os.replace)
    handle.write(str(os.getpid()))
os.replace(PID_FILE + ".tmp", PID_FILE)
BEAT = os.environ.get("TRAIN_MULTIGPU_HEARTBEAT_FILE")


def beat(iteration: int, total: int) -> None:
    with open(BEAT, "w") as handle:
        handle.write(f"{iteration} {total}")


def play_the_flight_recorder() -> None:
    import pickle
    import threading

    stem = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"]
    pipe = f"{stem}{rank}.pipe"
    if os.path.exists(pipe):
        os.unlink(pipe)
    os.mkfifo(pipe, 0o666)
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                asked = os.read(fd, 128)
            except BlockingIOError:
                continue
            if asked:
                prefix = os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/nccl_trace_rank_")
                with open(f"{prefix}{rank}", "wb") as dump:
                    pickle.dump(
                        {"version": "2.10", "rank": rank, "entries": [{"profiling_name": "gloo:all_reduce"}]}, dump
                    )

    threading.Thread(target=watch, daemon=True).start()


def stuck_forever() -> None:
    while True:
        time.sleep(1000)


if args.mode == "mute":
    stuck_forever()
if args.mode in ("silent", "mixed"):
    end = time.monotonic() + args.seconds
    iteration = 0
    while time.monotonic() < end:
        iteration += 1
        if args.mode == "mixed" and rank == 1:
            print(f"rank {rank} tick {iteration}", flush=True)
        elif args.mode == "mixed" and rank == 2:
            if iteration == 1:
                print(f"rank {rank} started, then says nothing", flush=True)
        else:
            beat(iteration, 0)
        time.sleep(0.2)
    sys.exit(0)

TOTAL = 1000
if args.mode == "torch":
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if os.environ.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"):
        play_the_flight_recorder()
    for iteration in range(1, TOTAL + 1):
        beat(iteration, TOTAL)
        print(f"rank {rank} iteration {iteration}", flush=True)
        if rank == args.stuck and iteration == args.at:
            stuck_forever()
        dist.all_reduce(torch.ones(1))
        time.sleep(0.1)
elif args.mode == "jax":
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDR"] + ":" + os.environ["JAX_COORDINATOR_PORT"],
        num_processes=int(os.environ["JAX_WORLD_SIZE"]),
        process_id=int(os.environ["JAX_RANK"]),
        local_device_ids=int(os.environ["JAX_LOCAL_RANK"]),
    )
    import numpy as np

    summed = jax.pmap(lambda x: jax.lax.psum(x, "ranks"), axis_name="ranks")

    def psum_across_ranks(value: float) -> float:
        return float(np.asarray(summed(np.array([value])))[0])

    for iteration in range(1, TOTAL + 1):
        beat(iteration, TOTAL)
        print(f"rank {rank} iteration {iteration}", flush=True)
        if rank == args.stuck and iteration == args.at:
            stuck_forever()
        psum_across_ranks(1.0)
        time.sleep(0.1)

"""What the machine allows two workers, before any training: the figures docs/example_trainers.md
quotes for "Scaling on CPU: what limits it".

    python benchmarks/host_limits.py [--seconds 3] [--size_kb 36] [--repeat 200]

1. CPU scaling: the work two busy-loop processes do per second against one (2 cores: about 2x).
2. TCP loopback round trip: one byte back and forth between two processes (median).
3. gloo all-reduce of a --size_kb float32 tensor (the example model's gradient) between two
   processes on this machine (median), what skrl's PPO does once per mini-batch per epoch.

Prints the load average first: on a loaded machine these figures mean little.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time


def _spin(seconds: float, out) -> None:
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            count += 1
    out.put(count)


def cpu_scaling(seconds: float) -> float:
    totals = {}
    for workers in (1, 2):
        queue = mp.Queue()
        procs = [mp.Process(target=_spin, args=(seconds, queue)) for _ in range(workers)]
        for p in procs:
            p.start()
        totals[workers] = sum(queue.get() for _ in procs)
        for p in procs:
            p.join()
    return totals[2] / totals[1]


def _echo(port: int, repeat: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(repeat):
            s.sendall(s.recv(1))


def loopback_round_trip_us(repeat: int) -> float:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        peer = mp.Process(target=_echo, args=(server.getsockname()[1], repeat))
        peer.start()
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                conn.sendall(b"x")
                conn.recv(1)
                times.append(time.perf_counter() - t0)
        peer.join()
    return 1e6 * statistics.median(times)


def _allreduce_rank(rank: int, port: int, numel: int, repeat: int, out) -> None:
    os.environ.update(OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    tensor = torch.ones(numel)
    for _ in range(10):  # warm-up
        dist.all_reduce(tensor)
    times = []
    for _ in range(repeat):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(tensor)
        times.append(time.perf_counter() - t0)
    dist.destroy_process_group()
    if rank == 0:
        out.put(1e3 * statistics.median(times))


def gloo_allreduce_ms(size_kb: float, repeat: int) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.Queue()
    numel = int(size_kb * 1024 / 4)
    procs = [mp.Process(target=_allreduce_rank, args=(r, port, numel, repeat, queue)) for r in (0, 1)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="busy-loop time per measurement")
    parser.add_argument("--size_kb", type=float, default=36.0, help="all-reduced tensor size")
    parser.add_argument("--repeat", type=int, default=200, help="round trips / all-reduces timed")
    args = parser.parse_args()
    mp.set_start_method("spawn")
    print(f"load average: {os.getloadavg()}  usable cores: {len(os.sched_getaffinity(0))}", flush=True)
    print(f"CPU scaling, 2 busy loops vs 1:          {cpu_scaling(args.seconds):.2f}x", flush=True)
    print(f"TCP loopback round trip (median):        {loopback_round_trip_us(args.repeat):.0f} us", flush=True)
    print(
        f"gloo all-reduce of {args.size_kb:g} KB, 2 processes: {gloo_allreduce_ms(args.size_kb, args.repeat):.2f} ms",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""On a CUDA machine: prove that the rendered profile env reaches NCCL through sitecustomize alone.

Run with sitecustomize/ on PYTHONPATH and KIT_PROFILE_ENV naming DIR/profile.env, written by
`launcher render PROFILE --state-dir DIR` (no kit code is imported here). The parent and a
multiprocessing 'spawn' child (how SGLang starts TP workers) each initialise NCCL with
NCCL_DEBUG=INFO, all-reduce inside a captured CUDA graph, and check the result; NCCL's own log
shows which variables it took "from the environment".
"""

import multiprocessing as mp
import os
import sys


def worker(tag: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    print(f"[{tag}] pid {os.getpid()} KIT_ACTIVE_PROFILE={os.environ.get('KIT_ACTIVE_PROFILE')} "
          f"NCCL_PROTO={os.environ.get('NCCL_PROTO')} NCCL_MAX_NCHANNELS={os.environ.get('NCCL_MAX_NCHANNELS')}",
          flush=True)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))
    x = torch.full((4 * 7168,), 3.0, device="cuda", dtype=torch.bfloat16)
    dist.all_reduce(x)  # warm-up outside the graph
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            dist.all_reduce(x)
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    ok = bool((x == 3.0).all())
    print(f"[{tag}] graph-captured all_reduce replayed 10x, result correct: {ok}", flush=True)
    dist.destroy_process_group()
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    worker("parent", 29511)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=worker, args=("spawned-child", 29512))
    p.start()
    p.join()
    sys.exit(p.exitcode)

#!/usr/bin/env python3
"""Run a command under torchrun's elastic agent (static rendezvous, the
default of `torchrun --nproc-per-node N`), the way torchrun itself would:
the agent serves a c10d TCPStore on --master-port and starts N workers with
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_USE_AGENT_STORE=True, TORCHELASTIC_RUN_ID, ...

Debian 12's `torchrun` script fails on Python 3.11 before it starts
anything (torch 1.13's Std.from_str returns None there), so this calls the
launcher API it wraps, with the output streams left alone.

usage: torchrun_launch.py --nproc N --master-port P [--run-id ID] -- COMMAND ARGS...
Exit status 0 when every worker succeeded, else 1 with the failure printed.
"""
import argparse
import sys

from torch.distributed.elastic.multiprocessing import Std
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--master-port", type=int, required=True)
    ap.add_argument("--run-id", default="none")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=a.nproc, run_id=a.run_id, rdzv_backend="static",
                       rdzv_endpoint=f"127.0.0.1:{a.master_port}", rdzv_configs={"rank": 0}, max_restarts=0,
                       monitor_interval=0.1, redirects=Std.NONE, tee=Std.NONE, start_method="spawn")
    try:
        elastic_launch(cfg, cmd[0])(*cmd[1:])
    except ChildFailedError as e:
        print(f"torchrun_launch: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

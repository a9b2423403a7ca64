#!/usr/bin/env python3
"""Serve a torch.distributed.TCPStore on 127.0.0.1:PORT, as torchrun's agent
does, until stdin closes; then print how many keys the runs left in it.
usage: agent_store.py PORT"""
import sys
from datetime import timedelta

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, timedelta(seconds=300), wait_for_workers=False)
print("ready", flush=True)
sys.stdin.read()
print(f"keys {store.num_keys()}", flush=True)

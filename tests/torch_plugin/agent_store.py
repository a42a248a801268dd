# One store per job, seen from a PyTorch script under `ringgrad-run --standalone --rdzv-conf
# token=...`: MASTER_ADDR:MASTER_PORT is the launcher's store (TORCHELASTIC_USE_AGENT_STORE=True,
# as under torchrun), listening on loopback only, and PyTorch's own TCPStore client does every
# operation there, within this generation's keys; a client of another user is refused (as
# root, where the test can switch users); then init_process_group("ringgrad") and an
# all_reduce over that store. Before, rank 0 hosted PyTorch's own store on every interface with no token.
import os
import subprocess
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import ringgrad_torch  # noqa: F401


def fail(why):
    print(f"agent_store: rank {os.environ.get('RANK')}: FAIL: {why}", flush=True)
    sys.exit(1)


def listening_addresses(port):
    """The local addresses of the sockets listening (state 0A) on `port`, from /proc/net/tcp."""
    found = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.rsplit(":", 1)
                if state == "0A" and int(hex_port, 16) == port:
                    found.append(address)
    return found


if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
    fail("TORCHELASTIC_USE_AGENT_STORE is not True")
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if addr != "127.0.0.1":
    fail(f"MASTER_ADDR is {addr}, not loopback, for --standalone")
if listening_addresses(port) != ["0100007F"]:  # 127.0.0.1 and nothing else
    fail(f"MASTER_PORT {port} listens on {listening_addresses(port)}, not 127.0.0.1 alone")

rank = int(os.environ["RANK"])
store = dist.TCPStore(addr, port, is_master=False, timeout=timedelta(seconds=30))
mine = f"probe/{rank}"
store.set(mine, "a")
store.append(mine, "b")
if store.get(mine) != b"ab":
    fail(f"get after set and append gave {store.get(mine)}")
if store.compare_set(mine, "ab", "c") != b"c":
    fail("compare_set did not swap")
store.multi_set([mine + "/x", mine + "/y"], ["1", "2"])
if store.multi_get([mine + "/x", mine + "/y"]) != [b"1", b"2"]:
    fail("multi_get")
store.add("probe/arrived", 1)
store.set(mine + "/added", "1")
store.wait(["probe/0/added", "probe/1/added"])  # the other rank's keys too
if store.add("probe/arrived", 0) != 2 or not store.check(["probe/0", "probe/1"]):
    fail("both ranks' keys are not there")
if not store.delete_key(mine + "/x") or store.check([mine + "/x"]):
    fail("delete_key")
try:
    store.wait(["probe/never"], timedelta(milliseconds=300))
    fail("a wait for a key nobody sets returned")
except Exception as e:  # PyTorch raises its own DistStoreError (a RuntimeError)
    if "timeout" not in str(e).lower():
        fail(f"the timed-out wait raised {e!r}")
store.set(mine + "/after", "ok")  # the connection still serves after a timed-out wait
if store.get(mine + "/after") != b"ok":
    fail("get after a timed-out wait")

# A client of another user (65534, nobody) sends what PyTorch's client sends first, VALIDATE
# and PING, from Debian's Python (the virtual environment's is not readable by that user): the
# store must close the connection unanswered.
STRANGER = f"""
import socket, struct, sys
s = socket.create_connection(("{addr}", {port}), timeout=10)
s.sendall(b"\\x00" + struct.pack("<I", 0x3C85F7CE) + b"\\x0d" + struct.pack("<I", 7))
try:
    answer = s.recv(4)
except ConnectionResetError:
    answer = b""
sys.exit(0 if answer == b"" else 1)
"""
if rank == 0 and os.geteuid() == 0:
    stranger = subprocess.run(["/usr/bin/python3", "-c", STRANGER], user=65534, group=65534,
                              capture_output=True, text=True, timeout=60)
    if stranger.returncode != 0:
        fail(f"a client of uid 65534 was not refused: {stranger.returncode} {stranger.stderr}")
elif rank == 0:
    print("agent_store: not root, so no client of another user is tried")

dist.init_process_group("ringgrad")
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
if not torch.equal(t, torch.full((1000,), 3.0)):
    fail(f"all_reduce gave {t[:4]}")
dist.destroy_process_group()
print(f"agent_store: rank {rank} ok", flush=True)

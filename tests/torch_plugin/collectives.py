# Every collective x dtype on the "ringgrad" default group against a Gloo group of the same
# processes, on the same inputs: integers exactly, floats within reordering tolerance. Then the
# errors: dtypes and ops ringgrad cannot reduce raise a RuntimeError naming the operation, and no
# error a user sees shows ringgrad's source location ("[file.cpp:42]", which is for logs). Sparse
# all_reduce (SUM) against Gloo's too. Tearing the group down with a Python future callback
# pending does not deadlock.
# Run by launch.py on 2 and 3 ranks.
import datetime
import re
import sys
import threading
import time

import torch
import torch.distributed as dist

import ringgrad_torch  # noqa: F401  (registers the "ringgrad" backend)

REDUCIBLE = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
             torch.int64, torch.uint8]
MOVED_ONLY = [torch.int8, torch.int16, torch.bool, torch.complex64]  # bytes for ringgrad
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
       "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
failures = []
# How ringgrad's errors say where they were thrown (core/error.h); a user reads the sentence alone.
SOURCE_LOCATION = re.compile(r"\[[\w./-]+\.(?:cpp|cu|h):\d+\]")


def check_no_source_location(what, error):
    if SOURCE_LOCATION.search(str(error)):
        failures.append(f"{what}: the error shows a source location: {error}")


def inputs(dtype, n, rank, seed=0):
    """Per-rank data: small integers (products of three stay exact even in float16 and
    uint8), random bools and complex numbers."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(n, generator=g, dtype=dtype)
    return torch.randint(1, 6, (n,), generator=g).to(dtype)


def check(what, got, want, exact):
    if got.dtype != want.dtype or got.shape != want.shape:
        failures.append(f"{what}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}")
    elif exact and not torch.equal(got, want):
        failures.append(f"{what}: differs from Gloo, first at {(got != want).nonzero()[0].item()}")
    elif not exact and not torch.allclose(got.double(), want.double(), rtol=1e-5, atol=1e-6):
        failures.append(f"{what}: not within tolerance of Gloo (max diff "
                        f"{(got.double() - want.double()).abs().max().item()})")


def both(fn):
    """Runs fn(group) on ringgrad (the default group) and on Gloo; returns both results."""
    return fn(None), fn(GLOO)


def gloo_or(fn, expected):
    """Gloo's result, or for a dtype Gloo refuses (int8, bool, ...) the known answer."""
    try:
        return fn()
    except RuntimeError as e:
        if "Invalid scalar type" not in str(e):
            raise
        return expected


def reference_allreduce(x, op_name):
    """Gloo has no AVG: the reference is Gloo's SUM divided as PyTorch divides."""
    if op_name != "avg":
        return None
    s = x.clone()
    dist.all_reduce(s, dist.ReduceOp.SUM, group=GLOO)
    if s.is_floating_point():
        return s / WORLD
    return torch.div(s, WORLD, rounding_mode="trunc")


def run_collectives(n):
    for dtype in REDUCIBLE:
        exact = not dtype.is_floating_point
        for op_name, op in OPS.items():
            x = inputs(dtype, n, RANK, seed=1)
            mine = x.clone()
            dist.all_reduce(mine, op)
            theirs = reference_allreduce(x, op_name)
            if theirs is None:
                theirs = x.clone()
                dist.all_reduce(theirs, op, group=GLOO)
            check(f"all_reduce {op_name} {dtype} n={n}", mine, theirs, exact and op_name != "avg")
            if op_name == "avg":
                continue
            for root in range(WORLD):
                mine, theirs = both(lambda g: (lambda t: (dist.reduce(t, root, op, group=g), t)[1])(x.clone()))
                if RANK == root:
                    check(f"reduce {op_name} {dtype} root {root} n={n}", mine, theirs, exact)
            # reduce_scatter: list form and single-tensor form.
            chunks = [inputs(dtype, n, RANK, seed=10 + i) for i in range(WORLD)]
            mine, theirs = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype)
            dist.reduce_scatter(mine, [c.clone() for c in chunks], op)
            try:
                dist.reduce_scatter(theirs, [c.clone() for c in chunks], op, group=GLOO)
            except (RuntimeError, ValueError):  # Gloo lacks it: the per-chunk all-reduce
                theirs = chunks[RANK].clone()
                dist.all_reduce(theirs, op, group=GLOO)
            check(f"reduce_scatter {op_name} {dtype} n={n}", mine, theirs, exact)
            flat = torch.cat(chunks)
            mine = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(mine, flat.clone(), op)
            check(f"reduce_scatter_tensor {op_name} {dtype} n={n}", mine, theirs, exact)
    # Random floats: sums in another order differ in the last bits at most.
    for dtype in [torch.float32, torch.float64]:
        x = torch.randn(n, generator=torch.Generator().manual_seed(RANK), dtype=dtype)
        mine, theirs = both(lambda g: (lambda t: (dist.all_reduce(t, group=g), t)[1])(x.clone()))
        check(f"all_reduce sum of random {dtype} n={n}", mine, theirs, False)
    for dtype in REDUCIBLE + MOVED_ONLY:
        x = inputs(dtype, n, RANK, seed=2)
        everyone = [inputs(dtype, n, r, seed=2) for r in range(WORLD)]
        for root in range(WORLD):
            mine = x.clone()
            dist.broadcast(mine, root)
            theirs = gloo_or(lambda: (lambda t: (dist.broadcast(t, root, group=GLOO), t)[1])(x.clone()),
                             everyone[root])
            check(f"broadcast {dtype} root {root} n={n}", mine, theirs, True)
        mine = [torch.empty(n, dtype=dtype) for _ in range(WORLD)]
        dist.all_gather(mine, x)
        theirs = gloo_or(lambda: (lambda ts: (dist.all_gather(ts, x, group=GLOO), ts)[1])(
            [torch.empty(n, dtype=dtype) for _ in range(WORLD)]), everyone)
        check(f"all_gather {dtype} n={n}", torch.stack(mine), torch.stack(theirs), True)
        mine = torch.empty(WORLD * n, dtype=dtype)
        dist.all_gather_into_tensor(mine, x)
        check(f"all_gather_into_tensor {dtype} n={n}", mine, torch.stack(theirs).flatten(), True)
        # send/recv around the ring: even ranks send first, so no pair waits on itself.
        if WORLD > 1:
            to, frm = (RANK + 1) % WORLD, (RANK - 1) % WORLD
            got = torch.empty(n, dtype=dtype)
            if RANK % 2 == 0:
                dist.send(x, to)
                dist.recv(got, frm)
            else:
                dist.recv(got, frm)
                dist.send(x, to)
            check(f"send/recv {dtype} n={n}", got, everyone[frm], True)
    # Futures, as DDP and comm hooks chain on them: whether or not the collective is done when
    # get_future() is called, the future and a callback chained on it see the result, and
    # all_gather's list is filled.
    x = inputs(torch.float32, n, RANK, seed=3)
    theirs = x.clone()
    dist.all_reduce(theirs, group=GLOO)
    doubled = dist.all_reduce(x.clone(), async_op=True).get_future().then(
        lambda f: f.value()[0] * 2).wait()
    check(f"all_reduce future with a callback n={n}", doubled, theirs * 2, True)
    gathered = [torch.empty(n) for _ in range(WORLD)]
    dist.all_gather(gathered, x, async_op=True).get_future().wait()
    check(f"all_gather future n={n}", torch.stack(gathered),
          torch.stack([inputs(torch.float32, n, r, seed=3) for r in range(WORLD)]), True)
    dist.barrier()


def expect_error(what, fn, words):
    try:
        fn()
    except RuntimeError as e:
        if not all(w in str(e) for w in words):
            failures.append(f"{what}: error does not name {words}: {e}")
        check_no_source_location(what, e)
        return
    failures.append(f"{what}: no error")


def run_errors():
    expect_error("all_reduce of bool", lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool)),
                 ["ringgrad", "all_reduce", "Bool"])
    expect_error("all_reduce BAND", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32),
                                                            dist.ReduceOp.BAND),
                 ["ringgrad", "all_reduce", "ReduceOp"])
    expect_error("all_to_all_single, splits not adding up",
                 lambda: dist.all_to_all_single(torch.zeros(2 * WORLD), torch.zeros(2 * WORLD),
                                                output_split_sizes=[2] * WORLD,
                                                input_split_sizes=[1] * WORLD),
                 ["ringgrad", "alltoall", "add up to"])
    expect_error("non-contiguous all_reduce", lambda: dist.all_reduce(torch.ones(4, 4).t()),
                 ["ringgrad", "contiguous"])
    # The group still works after refused calls (they never reached the ring).
    t = torch.ones(2)
    dist.all_reduce(t)
    if t.tolist() != [WORLD] * 2:
        failures.append(f"all_reduce after refused calls gave {t.tolist()}")


def sparse_input(rank, sizes, dense, nnz, dtype, seed):
    """A sparse COO tensor of `sizes` (sparse dims) + `dense` (dense dims) whose `nnz` random
    indices depend on the rank and repeat (uncoalesced), so ranks overlap; small integer
    values, exact in every dtype."""
    g = torch.Generator().manual_seed(100 * seed + rank)
    indices = torch.stack([torch.randint(0, s, (nnz,), generator=g) for s in sizes])
    values = torch.randint(-5, 6, (nnz, *dense), generator=g).to(dtype)
    return torch.sparse_coo_tensor(indices, values, (*sizes, *dense))


def check_sparse(what, got, want, exact):
    if not got.is_sparse or not got.is_coalesced():
        failures.append(f"{what}: the result is not a coalesced sparse tensor ({got.layout})")
        return
    want = want.coalesce()
    if not torch.equal(got._indices(), want._indices()):
        failures.append(f"{what}: indices differ from Gloo's: {got._indices().tolist()} vs "
                        f"{want._indices().tolist()}")
        return
    check(what, got._values().flatten(), want._values().flatten(), exact)


def run_sparse():
    """all_reduce (SUM) of sparse tensors against Gloo's on the same inputs: indices that
    overlap across ranks and repeat within one, a rank with no non-zeros, dense dims; two in
    flight at once with a dense all_reduce between them, waited for in reverse order; and the
    refusals."""
    cases = [  # (sparse sizes, dense sizes, nnz of rank r, dtype)
        ((10,), (), lambda r: 6 + r, torch.float32),
        ((10,), (), lambda r: 0 if r == WORLD - 1 else 4, torch.int64),  # the last has none
        ((5, 4), (3,), lambda r: 3 * r, torch.float64),  # rank 0 has none
        ((7, 3, 2), (2, 2), lambda r: 5, torch.float32),
        ((4,), (), lambda r: 0, torch.float32),  # nobody has any
        ((1000,), (8,), lambda r: 300 + 50 * r, torch.float64),
    ]
    for i, (sizes, dense, nnz, dtype) in enumerate(cases):
        x = sparse_input(RANK, sizes, dense, nnz(RANK), dtype, seed=i)
        mine, theirs = x.clone(), x.clone()
        dist.all_reduce(mine)
        dist.all_reduce(theirs, group=GLOO)
        check_sparse(f"sparse all_reduce {sizes}+{dense} {dtype}", mine, theirs, True)
        # Gloo's oracle is itself checked against the sum of everyone's tensors.
        everyone = sum(sparse_input(r, sizes, dense, nnz(r), dtype, seed=i).to_dense()
                       for r in range(WORLD))
        check(f"sparse all_reduce {sizes}+{dense} {dtype}, densified", mine.to_dense().flatten(),
              everyone.flatten(), True)
    # Random floats: the same bits on every rank.
    x = torch.sparse_coo_tensor(torch.tensor([[0, 3, 3, 9]]), torch.randn(
        4, generator=torch.Generator().manual_seed(RANK)), (10,))
    mine = x.clone()
    dist.all_reduce(mine)
    everyone = [torch.empty_like(mine._values()) for _ in range(WORLD)]
    dist.all_gather(everyone, mine._values(), group=GLOO)
    if not all(torch.equal(v, everyone[0]) for v in everyone):
        failures.append("sparse all_reduce of random floats differs across ranks")
    # Two in flight, a dense one between: each gets its own peers' tensors.
    a = sparse_input(RANK, (6,), (), 2 + RANK, torch.float32, seed=20)
    b = sparse_input(RANK, (6, 6), (), 5, torch.float32, seed=21)
    wa = dist.all_reduce(a_mine := a.clone(), async_op=True)
    dense = torch.ones(3)
    wd = dist.all_reduce(dense, async_op=True)
    wb = dist.all_reduce(b_mine := b.clone(), async_op=True)
    wb.wait()
    wd.wait()
    wa.wait()
    for name, x, got in [("first", a, a_mine), ("second", b, b_mine)]:
        theirs = x.clone()
        dist.all_reduce(theirs, group=GLOO)
        check_sparse(f"sparse all_reduce in flight with another, the {name}", got, theirs, True)
    if dense.tolist() != [WORLD] * 3:
        failures.append(f"dense all_reduce between two sparse ones gave {dense.tolist()}")

    s = sparse_input(RANK, (4,), (), 2, torch.float32, seed=30)
    expect_error("sparse all_reduce PRODUCT", lambda: dist.all_reduce(s.clone(), dist.ReduceOp.PRODUCT),
                 ["ringgrad", "sparse", "SUM"])
    expect_error("sparse all_reduce of sizes that differ across ranks",
                 lambda: dist.all_reduce(sparse_input(RANK, (4 + RANK,), (), 2, torch.float32, 31)),
                 ["ringgrad", "sparse", "rank", "size"])
    t = s.clone()  # the group still works after that
    dist.all_reduce(t)
    theirs = s.clone()
    dist.all_reduce(theirs, group=GLOO)
    check_sparse("sparse all_reduce after a refused one", t, theirs, True)


def run_sparse_returns_at_once():
    """async_op=True returns before the peers issue the sparse all_reduce (as in
    run_async_returns_at_once); a dense tensor on the other ranks meanwhile fails every rank's
    call with a RuntimeError (on a group of its own, which it leaves unusable)."""
    store = dist.distributed_c10d._get_default_store()
    x = sparse_input(RANK, (8,), (), 3, torch.float32, seed=40)
    mine = x.clone()
    if RANK == 0:
        work = dist.all_reduce(mine, async_op=True)
        if work.is_completed():
            failures.append("async sparse all_reduce completed before its peers issued it")
        store.set("sparse/issued0", "1")
        work.wait()
    else:
        store.wait(["sparse/issued0"], datetime.timedelta(seconds=60))
        dist.all_reduce(mine)
    theirs = x.clone()
    dist.all_reduce(theirs, group=GLOO)
    check_sparse("async sparse all_reduce", mine, theirs, True)

    mixed = dist.new_group(backend="ringgrad", timeout=datetime.timedelta(seconds=20))
    t = x.clone() if RANK == 0 else torch.ones(8)
    expect_error("sparse all_reduce on rank 0, dense on the others",
                 lambda: dist.all_reduce(t, group=mixed), ["ringgrad", "collective mismatch"])
    dist.destroy_process_group(mixed)


def run_point_to_point():
    """send/recv matched as Gloo matches them: per (peer, direction, tag), so every rank may
    post its irecv before its isend (batch_isend_irecv around the ring), a receive of tag 8
    posted before one of tag 7 gets the tag-8 message, and a recv with no source takes the
    next message and returns its sender."""
    to, frm = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    for n in [3, 1 << 20]:
        got = torch.zeros(n)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got, frm),
                                       dist.P2POp(dist.isend, torch.full((n,), float(RANK)), to)])
        for r in reqs:
            r.wait()
        if not torch.equal(got, torch.full((n,), float(frm))):
            failures.append(f"batch_isend_irecv n={n}: got {got[:3].tolist()} from rank {frm}")
    if RANK == 0:
        dist.send(torch.full((2,), 7.0), 1, tag=7)
        dist.send(torch.full((2,), 8.0), 1, tag=8)
    elif RANK == 1:
        eight, seven = torch.zeros(2), torch.zeros(2)
        w8 = dist.irecv(eight, 0, tag=8)
        w7 = dist.irecv(seven, 0, tag=7)
        w8.wait()
        w7.wait()
        if eight.tolist() != [8.0, 8.0] or seven.tolist() != [7.0, 7.0]:
            failures.append(f"tags 8 then 7 received {eight.tolist()} and {seven.tolist()}")
    if RANK == 0:
        senders = []
        for _ in range(WORLD - 1):
            got = torch.zeros(4)
            sender = dist.recv(got)
            senders.append(sender)
            if got.tolist() != [float(sender)] * 4:
                failures.append(f"recv from any source: {got.tolist()} from rank {sender}")
        if sorted(senders) != list(range(1, WORLD)):
            failures.append(f"recv from any source named senders {senders}")
    else:
        dist.send(torch.full((4,), float(RANK)), 0)


def run_async_returns_at_once():
    """async_op=True returns at once whatever the size, and wait(timeout) raises at its
    timeout while a peer has not joined; the collective still completes afterwards. Rank 0
    checks both before the other ranks even issue the all_reduce (they wait for its key), so
    a call that blocked until every rank arrived would never return."""
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(2)
    if RANK == 0:
        work = dist.all_reduce(t, async_op=True)
        if work.is_completed():
            failures.append("async all_reduce completed before its peers issued it")
        try:
            work.wait(timeout=datetime.timedelta(milliseconds=200))
            failures.append("wait(200 ms) returned before the peers issued the all_reduce")
        except RuntimeError as e:
            check_no_source_location("wait(200 ms)", e)
        store.set("async/issued0", "1")
        work.wait()
    else:
        store.wait(["async/issued0"], datetime.timedelta(seconds=60))
        dist.all_reduce(t)
    if t.tolist() != [WORLD] * 2:
        failures.append(f"async all_reduce gave {t.tolist()}")


def run_gil_released_while_waiting():
    """A small all_reduce waited on at once runs on the waiting thread. While it
    waits for a late peer, other Python threads must run: here the late rank joins only after
    every other rank's helper thread has taken the GIL a hundred times (sleeping in between)
    during that rank's all_reduce. Were the GIL held while waiting, the helper would stop at
    its next turn and the last rank would fail after 60 s instead."""
    store = dist.distributed_c10d._get_default_store()
    if RANK == WORLD - 1:
        try:
            store.wait([f"gil/ran{r}" for r in range(WORLD - 1)], datetime.timedelta(seconds=60))
        except RuntimeError as e:
            failures.append(f"the other ranks' threads did not run while they waited in a small all_reduce: {e}")
            return
    else:
        entered = threading.Event()

        def helper_turns():
            entered.wait()
            for _ in range(100):
                time.sleep(0.001)
            store.set(f"gil/ran{RANK}", "1")

        helper = threading.Thread(target=helper_turns)
        helper.start()
        entered.set()
    t = torch.ones(2)
    dist.all_reduce(t)
    if RANK != WORLD - 1:
        helper.join()
    if t.tolist() != [WORLD] * 2:
        failures.append(f"all_reduce with a late rank gave {t.tolist()}")


dist.init_process_group("ringgrad")
RANK, WORLD = dist.get_rank(), dist.get_world_size()
GLOO = dist.new_group(backend="gloo")
for n in [1, 7, 70_000]:  # the 70,000-element case takes ringgrad's ring path
    run_collectives(n)
run_errors()
run_sparse()
run_sparse_returns_at_once()
run_point_to_point()
run_async_returns_at_once()
run_gil_released_while_waiting()
# Teardown while a future's Python callback is pending: the callback needs the GIL on
# ringgrad's future thread while this thread destroys the group, which must release it. The
# last rank joins late, so the others' all_reduce is still running when they tear down.
if RANK == WORLD - 1:
    time.sleep(3)
big = torch.ones(1 << 22)
chained = dist.all_reduce(big, async_op=True).get_future().then(lambda f: f.value()[0][:4].sum())
dist.destroy_process_group()
if chained.wait().item() != 4 * WORLD:
    failures.append(f"future chained before teardown gave {chained.wait()}")
for f in failures:
    print(f"rank {RANK}: FAIL {f}")
print(f"rank {RANK}: {'FAILED' if failures else 'ok'} ({len(failures)} failures)")
sys.exit(1 if failures else 0)

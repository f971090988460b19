#!/usr/bin/python3
"""Job chaos (issue 41; docs/clients.md, "Jobs"): training jobs of p = 4 ranks on one
`gradsync local` group, each struck by a fault, each followed by a new job.

Every round starts a job whose 4 rank processes run a training-like loop of checked collectives of
mixed kinds and sizes, then strikes it: SIGKILL one rank's client process at a random moment
("kill"), Ctrl-C every process ("interrupt"), or start a second job on the same daemons before the
first has ended and then kill both ("second"). Then a next job runs one checked all-reduce. Every
op a process finished is classified right, failed clearly (a gradsync.Error with a message),
failed unclearly or wrong (returned with wrong values).

Targets (exit status 1 when one is missed): every next job right on its first op, no op wrong or
failed unclearly, every survivor of a kill failing within --max-survivor-error-s of it, no op of
a killed or interrupted job failing before the fault struck (nothing had gone wrong yet), every
process ending once struck. Figures with no target: the time from a fault to the next job's
first success, how many survivors' errors name the killed rank, what the second jobs saw.

    python/tests/job_chaos.py --rounds 100 --seed 1 --bin build/bin

A rank process is this file again, with --rank-worker: it reports on stdout, one JSON line per
event, with time.time() stamps that the harness compares with the moments it struck.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

WORLD = 4
FAULTS = ("kill", "interrupt", "second")

# ---------------------------------------------------------------------------------------------
# The rank process: one process of a training job.
# ---------------------------------------------------------------------------------------------

# Element counts of the loop's ops, and how often each comes: small ops are the many, 1M floats
# (4 MB) the occasional big gradient.
SIZES = (1, 5, 1000, 4097, 65536, 1 << 20)
SIZE_WEIGHTS = (2, 2, 3, 2, 2, 1)
KINDS = ("allreduce", "allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall",
         "alltoallv", "barrier")


@dataclass(frozen=True)
class Step:
    """One op of the loop; every rank of a job draws the same sequence from the job's seed."""

    kind: str
    count: int
    dtype: str
    op: str


def draw_step(rng: random.Random) -> Step:
    """The next op. Every field is drawn whatever the kind, so that the ranks stay in step."""
    kind = rng.choice(KINDS)
    count = rng.choices(SIZES, SIZE_WEIGHTS)[0]
    dtype = rng.choice(("float32", "float32", "float64", "int32"))
    # An integer average would round; the other reductions are exact on these values.
    op = rng.choice(("sum", "max") if dtype == "int32" else ("sum", "avg", "max"))
    return Step(kind, count, dtype, op)


def base_values(np: Any, count: int, index: int, dtype: str) -> Any:
    """Small positive integers that differ by op and element, exact in every dtype used (sums
    of 4 ranks stay far below 2^24)."""
    return ((np.arange(count, dtype=np.int64) + index) % 251 + 1).astype(dtype)


def chunk_of(count: int, rank: int) -> tuple[int, int]:
    """This rank's (offset, size) in the balanced partition: the first count % p ranks get one
    element more (Client.reduce_scatter)."""
    size = count // WORLD + (1 if rank < count % WORLD else 0)
    offset = rank * (count // WORLD) + min(rank, count % WORLD)
    return offset, size


def compare(np: Any, got: Any, expected: Any) -> Optional[str]:
    """None when equal, else where they first differ."""
    if np.array_equal(got, expected):
        return None
    where = int(np.flatnonzero(got != expected)[0])
    return f"element {where} of {got.size}: {got[where]!r}, expected {expected[where]!r}"


def run_allreduce(np: Any, client: Any, step: Step, rank: int, index: int,
                  timeout: float) -> Optional[str]:
    """Rank r contributes (r + 1) times the base values."""
    base = base_values(np, step.count, index, step.dtype)
    data = base * (rank + 1)
    client.allreduce(data, op=step.op, timeout=timeout)
    factor = {"sum": WORLD * (WORLD + 1) / 2, "avg": (WORLD + 1) / 2, "max": WORLD}[step.op]
    return compare(np, data, (base.astype(np.float64) * factor).astype(step.dtype))


def run_allgather(np: Any, client: Any, step: Step, rank: int, index: int,
                  timeout: float) -> Optional[str]:
    expected = base_values(np, step.count, index, step.dtype)
    offset, size = chunk_of(step.count, rank)
    output = np.full(step.count, -1, dtype=step.dtype)
    client.allgather(expected[offset:offset + size].copy(), output, timeout=timeout)
    return compare(np, output, expected)


def run_reduce_scatter(np: Any, client: Any, step: Step, rank: int, index: int,
                       timeout: float) -> Optional[str]:
    base = base_values(np, step.count, index, step.dtype)
    offset, size = chunk_of(step.count, rank)
    output = np.full(size, -1, dtype=step.dtype)
    client.reduce_scatter(base * (rank + 1), output, timeout=timeout)
    return compare(np, output, base[offset:offset + size] * (WORLD * (WORLD + 1) // 2))


def run_broadcast(np: Any, client: Any, step: Step, rank: int, index: int,
                  timeout: float) -> Optional[str]:
    """The root changes every op; its values say which root it was."""
    root = index % WORLD
    expected = base_values(np, step.count, index, step.dtype) + root
    data = expected.copy() if rank == root else np.full(step.count, -1, dtype=step.dtype)
    client.broadcast(data, root=root, timeout=timeout)
    return compare(np, data, expected)


def run_alltoall(np: Any, client: Any, step: Step, rank: int, index: int,
                 timeout: float) -> Optional[str]:
    """Block j of rank i's input holds i * p + j over the base values: each block says where it
    came from and where it was going."""
    block = base_values(np, max(step.count // WORLD, 1), index, step.dtype)
    sent = np.concatenate([block + (rank * WORLD + j) for j in range(WORLD)])
    output = np.full(sent.size, -1, dtype=step.dtype)
    client.alltoall(sent, output, timeout=timeout)
    return compare(np, output, np.concatenate([block + (i * WORLD + rank) for i in range(WORLD)]))


def run_alltoallv(np: Any, client: Any, step: Step, rank: int, index: int,
                  timeout: float) -> Optional[str]:
    """As run_alltoall, with blocks of their own lengths: rank i sends rank j count // p +
    (i + 2j) mod 3 values."""
    def block(source: int, destination: int) -> Any:
        length = step.count // WORLD + (source + 2 * destination) % 3
        return base_values(np, length, index, step.dtype) + (source * WORLD + destination)

    sent = np.concatenate([block(rank, j) for j in range(WORLD)])
    expected = np.concatenate([block(i, rank) for i in range(WORLD)])
    output = np.full(expected.size, -1, dtype=step.dtype)
    client.alltoall(sent, output, timeout=timeout,
                    send_counts=[block(rank, j).size for j in range(WORLD)],
                    recv_counts=[block(i, rank).size for i in range(WORLD)])
    return compare(np, output, expected)


def run_barrier(np: Any, client: Any, step: Step, rank: int, index: int,
                timeout: float) -> Optional[str]:
    client.barrier(timeout=timeout)
    return None


RUNNERS: dict[str, Callable[..., Optional[str]]] = {
    "allreduce": run_allreduce, "allgather": run_allgather,
    "reduce_scatter": run_reduce_scatter, "broadcast": run_broadcast,
    "alltoall": run_alltoall, "alltoallv": run_alltoallv, "barrier": run_barrier,
}
# The next job's one op: a plain gradient all-reduce.
FIRST_OP = Step("allreduce", 65536, "float32", "sum")


def die_with_parent(signal_number: int) -> None:
    """Asks Linux to send `signal_number` when the parent ends (prctl PR_SET_PDEATHSIG): a
    harness killed outright (a CI timeout) leaves nothing running behind it."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal_number)


def emit(event: str, **fields: Any) -> None:
    """One journal line; flushed, so that what a killed process did is on record."""
    try:
        print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)
    except BrokenPipeError:
        pass  # the harness is gone; nobody reads


def run_ops(np: Any, gradsync: Any, client: Any, args: argparse.Namespace) -> bool:
    """Runs checked ops until the first error (False), --steps or --duration-s."""
    rng = random.Random(args.plan_seed)
    deadline = time.monotonic() + args.duration_s
    for index in range(args.steps):
        if time.monotonic() > deadline:
            break
        step = FIRST_OP if args.first_op_only else draw_step(rng)
        record = {"index": index, "kind": step.kind, "count": step.count, "dtype": step.dtype,
                  "op": step.op, "t0": time.time()}
        try:
            wrong = RUNNERS[step.kind](np, client, step, args.rank, index, args.op_timeout)
        except gradsync.Error as error:
            emit("op", outcome="failed" if str(error) else "unclear", t1=time.time(),
                 error=type(error).__name__, message=str(error), **record)
            return False
        except Exception as error:  # noqa: BLE001 (anything else is an unclear failure)
            emit("op", outcome="unclear", t1=time.time(), error=type(error).__name__,
                 message=str(error), **record)
            return False
        emit("op", outcome="wrong" if wrong else "right", t1=time.time(), detail=wrong,
             **record)
    return True


def rank_worker(args: argparse.Namespace) -> int:
    """A rank of a job (its name from GRADSYNC_JOB). After an error it keeps its client open
    for --linger-s, as a script that reports and saves before it exits would: then every
    survivor of a kill has to learn of it from the killed rank, not from another survivor that
    left. Ctrl-C ends it at once, as it would a training script, journalled."""
    die_with_parent(signal.SIGKILL)
    import numpy as np

    import gradsync

    try:
        try:
            client = gradsync.Client(args.socket, timeout=args.op_timeout, local_rank=0)
        except gradsync.Error as error:
            emit("connect_error", error=type(error).__name__, message=str(error))
            return 1
        emit("ready", rank=client.rank, job=client.job)
        if not run_ops(np, gradsync, client, args):
            time.sleep(args.linger_s)
            return 1
        client.close()
        emit("done")
        return 0
    except KeyboardInterrupt:
        emit("interrupted")
        return 130


# ---------------------------------------------------------------------------------------------
# The harness.
# ---------------------------------------------------------------------------------------------


class LocalGroup:
    """`gradsync local --workers 4` for the whole run: its sockets in rank order, its work
    directory (the daemons' logs) and its output, drained so that it never blocks."""

    def __init__(self, bin_dir: str, start_timeout: float = 60.0) -> None:
        # A session of its own, which stop() ends; SIGTERM, which stops its daemons, if this
        # process is killed first. No thread runs yet, which preexec_fn needs.
        self.process = subprocess.Popen(
            [os.path.join(bin_dir, "gradsync"), "local", "--workers", str(WORLD)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            preexec_fn=lambda: die_with_parent(signal.SIGTERM))
        self.output: list[str] = []
        lines: queue.Queue[Optional[str]] = queue.Queue()
        threading.Thread(target=self._drain, args=(lines,), daemon=True).start()
        self.sockets: list[str] = []
        deadline = time.monotonic() + start_timeout
        while len(self.sockets) < WORLD:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                raise RuntimeError("gradsync local did not start:\n" + "".join(self.output))
            if line.startswith("rank "):
                self.sockets.append(line.split(": ", 1)[1].strip())
        self.directory = os.path.dirname(self.sockets[0])

    def _drain(self, lines: queue.Queue[Optional[str]]) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            lines.put(line)
        lines.put(None)

    def alive(self) -> bool:
        return self.process.poll() is None

    def copy_logs(self, destination: str) -> None:
        """The daemons' logs, which `gradsync local` deletes when it stops."""
        os.makedirs(destination, exist_ok=True)
        for name in os.listdir(self.directory):
            if name.endswith(".log"):
                shutil.copy(os.path.join(self.directory, name), destination)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)


class RankProcess:
    """One rank process of a job and its journal, read as it comes."""

    def __init__(self, argv: list[str], env: dict[str, str], process_group: int) -> None:
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env, process_group=process_group)
        self.events: list[dict[str, Any]] = []
        self.text: list[str] = []  # anything not a journal line: tracebacks
        self.ready = threading.Event()
        self.stopped = threading.Event()  # its ops have ended: an error, done, or interrupted
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self.text.append(line.rstrip())
                continue
            self.events.append(event)
            if event["event"] in ("ready", "connect_error"):
                self.ready.set()
            if (event["event"] in ("connect_error", "done", "interrupted")
                    or event.get("outcome") in ("failed", "unclear")):
                self.stopped.set()
        self.ready.set()  # gone without a word
        self.stopped.set()

    def ops(self) -> list[dict[str, Any]]:
        return [event for event in self.events if event["event"] == "op"]

    def first_error(self) -> Optional[dict[str, Any]]:
        return next((op for op in self.ops() if op["outcome"] in ("failed", "unclear")), None)


class Job:
    """The 4 rank processes of one training job, in one process group as a shell would start
    them (Ctrl-C reaches them all)."""

    def __init__(self, name: str, sockets: list[str], args: argparse.Namespace,
                 plan_seed: int, first_op_only: bool = False) -> None:
        self.name = name
        env = {key: value for key, value in os.environ.items()
               if key not in ("GRADSYNC_SOCKET", "GRADSYNC_SOCKETS", "LOCAL_RANK")}
        env["GRADSYNC_JOB"] = name
        self.ranks: list[RankProcess] = []
        for rank, socket in enumerate(sockets):
            argv = [sys.executable, os.path.abspath(__file__), "--rank-worker",
                    "--rank", str(rank), "--socket", socket, "--plan-seed", str(plan_seed),
                    "--op-timeout", str(args.op_timeout),
                    # Past the survivors' bound: a survivor that is late cannot blame another.
                    "--linger-s", str(args.max_survivor_error_s + 0.5)]
            if first_op_only:
                argv += ["--first-op-only", "--steps", "1"]
            group = self.ranks[0].popen.pid if self.ranks else 0
            self.ranks.append(RankProcess(argv, env, group))
        self.group = self.ranks[0].popen.pid

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(rank.ready.wait(max(deadline - time.monotonic(), 0)) for rank in self.ranks)

    def wait_stopped(self, timeout: float) -> None:
        """Until every process has stopped running ops, or `timeout`."""
        deadline = time.monotonic() + timeout
        for rank in self.ranks:
            rank.stopped.wait(max(deadline - time.monotonic(), 0))

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the job's process group."""
        try:
            os.killpg(self.group, signal.SIGINT)
        except ProcessLookupError:
            pass  # every process has ended already

    def kill(self, rank: int) -> None:
        if self.ranks[rank].popen.poll() is None:
            self.ranks[rank].popen.kill()

    def kill_all(self) -> None:
        for rank in range(WORLD):
            self.kill(rank)

    def wait_gone(self, timeout: float) -> list[int]:
        """Waits for every process to end; kills the ones that have not by then, and returns
        their ranks."""
        deadline = time.monotonic() + timeout
        hung = []
        for rank, process in enumerate(self.ranks):
            try:
                process.popen.wait(timeout=max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                hung.append(rank)
                process.popen.kill()
                process.popen.wait()
        for process in self.ranks:
            process.reader.join(timeout=5)
        return hung


@dataclass
class Round:
    """What one round struck and what it saw."""

    index: int
    fault: str
    jobs: list[Job] = field(default_factory=list)
    struck_at: float = 0.0  # when the harness sent the last signal of the fault
    victim: Optional[int] = None
    survivor_latencies: list[float] = field(default_factory=list)
    survivors_naming_victim: int = 0
    all_gone_after: Optional[float] = None  # interrupt: from SIGINT to the last process gone
    next_ok: bool = False
    next_after: Optional[float] = None  # from struck_at to the next job's last rank right
    next_op_s: Optional[float] = None  # the next job's op itself, the slowest rank's
    problems: list[str] = field(default_factory=list)  # targets missed
    notes: list[str] = field(default_factory=list)  # odd, but no target


def job_name(round_index: int, role: str) -> str:
    return f"jobchaos-{os.getpid()}-{round_index}-{role}"


def start_job(round_: Round, group: LocalGroup, args: argparse.Namespace,
              rng: random.Random, role: str) -> Job:
    job = Job(job_name(round_.index, role), group.sockets, args, rng.randrange(1 << 30))
    round_.jobs.append(job)
    return job


def end_processes(round_: Round, job: Job, timeout: float) -> None:
    for rank in job.wait_gone(timeout):
        round_.problems.append(f"job {job.name} rank {rank} still ran {timeout:.0f} s later")


def check_identity(round_: Round, job: Job) -> None:
    """Each process is the rank of the socket it was given, in the job GRADSYNC_JOB names."""
    for rank, process in enumerate(job.ranks):
        for ready in (event for event in process.events if event["event"] == "ready"):
            if (ready["rank"], ready["job"]) != (rank, job.name):
                round_.problems.append(f"rank {rank} of job {job.name} connected as rank "
                                       f"{ready['rank']} of job {ready['job']}")


def note_failures_before(round_: Round, job: Job) -> None:
    """Nothing struck the job before struck_at: an op that failed by then failed for nothing."""
    for rank, process in enumerate(job.ranks):
        error = process.first_error()
        if error is not None and error["t1"] < round_.struck_at:
            round_.problems.append(f"rank {rank} failed before the fault: {error['error']}: "
                                   f"{error['message']}")


def strike_kill(round_: Round, group: LocalGroup, args: argparse.Namespace,
                rng: random.Random) -> None:
    """SIGKILL one rank's client process at a random moment of the loop: the others' ops fail
    at once, naming it. Once they have, the job is killed, as a supervisor would end it."""
    job = start_job(round_, group, args, rng, "main")
    if not job.wait_ready(args.start_timeout):
        round_.problems.append(f"job {job.name} did not start")
    time.sleep(rng.uniform(0, args.max_delay_s))
    round_.victim = rng.randrange(WORLD)
    round_.struck_at = time.time()
    job.kill(round_.victim)
    job.wait_stopped(args.op_timeout + 5)
    job.kill_all()
    end_processes(round_, job, 10)
    note_failures_before(round_, job)
    for rank, process in enumerate(job.ranks):
        if rank == round_.victim:
            continue
        error = process.first_error()
        if error is None:
            round_.problems.append(f"survivor rank {rank} ended without an error: "
                                   f"{process.events[-1:] or process.text[-3:]}")
            continue
        if error["t1"] < round_.struck_at:
            continue  # noted above
        latency = error["t1"] - round_.struck_at
        round_.survivor_latencies.append(latency)
        if latency > args.max_survivor_error_s:
            round_.problems.append(f"survivor rank {rank} failed {latency * 1e3:.0f} ms after "
                                   f"rank {round_.victim}'s kill: {error['error']}: "
                                   f"{error['message']}")
        if f"rank {round_.victim}" in error["message"]:
            round_.survivors_naming_victim += 1
        else:
            round_.notes.append(f"survivor rank {rank}'s error does not name rank "
                                f"{round_.victim}: {error['error']}: {error['message']}")


def strike_interrupt(round_: Round, group: LocalGroup, args: argparse.Namespace,
                     rng: random.Random) -> None:
    """Ctrl-C every process of the job at a random moment of the loop."""
    job = start_job(round_, group, args, rng, "main")
    if not job.wait_ready(args.start_timeout):
        round_.problems.append(f"job {job.name} did not start")
    time.sleep(rng.uniform(0, args.max_delay_s))
    round_.struck_at = time.time()
    job.interrupt()
    end_processes(round_, job, args.op_timeout + 10)
    round_.all_gone_after = time.time() - round_.struck_at
    note_failures_before(round_, job)


def strike_second_job(round_: Round, group: LocalGroup, args: argparse.Namespace,
                      rng: random.Random) -> None:
    """A second job on the same daemons before the first has ended (from the first's start on,
    so sometimes while the first still claims them); then both killed. Whichever holds a daemon
    is refused nothing; the other's ops fail clearly."""
    first = start_job(round_, group, args, rng, "main")
    # A quarter start together, racing for the daemons.
    time.sleep(0 if rng.random() < 0.25 else rng.uniform(0, args.max_delay_s))
    second = start_job(round_, group, args, rng, "second")
    time.sleep(rng.uniform(0.5, args.max_delay_s))
    round_.struck_at = time.time()
    first.kill_all()
    second.kill_all()
    end_processes(round_, first, 10)
    end_processes(round_, second, 10)


STRIKES = {"kill": strike_kill, "interrupt": strike_interrupt, "second": strike_second_job}


def run_next_job(round_: Round, group: LocalGroup, args: argparse.Namespace,
                 rng: random.Random) -> None:
    """A new job once the struck one's processes are gone: its first op must be right."""
    job = Job(job_name(round_.index, "next"), group.sockets, args, rng.randrange(1 << 30),
              first_op_only=True)
    round_.jobs.append(job)
    end_processes(round_, job, args.start_timeout + args.op_timeout)
    firsts = [process.ops()[0] if process.ops() else None for process in job.ranks]
    right = [op for op in firsts if op is not None and op["outcome"] == "right"]
    round_.next_ok = len(right) == WORLD
    if round_.next_ok:
        round_.next_after = max(op["t1"] for op in right) - round_.struck_at
        round_.next_op_s = max(op["t1"] - op["t0"] for op in right)
        return
    for rank, (process, op) in enumerate(zip(job.ranks, firsts)):
        if op is None:
            said = process.events[-1:] or process.text[-3:]
            round_.problems.append(f"next job rank {rank}: no op ({said})")
        elif op["outcome"] != "right":
            round_.problems.append(f"next job rank {rank}: {op['outcome']} "
                                   f"{op.get('error', '')}: {op.get('message') or op['detail']}")


# ---------------------------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------------------------


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"median {statistics.median(values) * 1e3:.0f} ms, "
            f"max {max(values) * 1e3:.0f} ms")


def failed_in(job: Job) -> bool:
    return any(process.first_error() is not None for process in job.ranks)


def right_in(job: Job) -> bool:
    return any(op["outcome"] == "right" for process in job.ranks for op in process.ops())


def print_figures(rounds: list[Round], args: argparse.Namespace) -> None:
    """The figures the issue asks for, by fault and in all."""
    jobs = [job for round_ in rounds for job in round_.jobs]
    ops = [op for job in jobs for process in job.ranks for op in process.ops()]
    outcomes = collections.Counter(op["outcome"] for op in ops)
    mix = collections.Counter(round_.fault for round_ in rounds)
    next_ok = sum(round_.next_ok for round_ in rounds)
    latencies = [value for round_ in rounds for value in round_.survivor_latencies]
    naming = sum(round_.survivors_naming_victim for round_ in rounds)
    failures = [op for op in ops if "error" in op]
    errors = collections.Counter(op["error"] for op in failures)
    examples = {op["error"]: op["message"] for op in reversed(failures)}

    print(f"\njob chaos: p = {WORLD}, {len(rounds)} rounds, seed {args.seed}")
    print("fault mix: " + ", ".join(f"{fault} {mix[fault]}" for fault in FAULTS))
    print("\n| fault | rounds | survivors' error after the kill | every process gone after "
          "| next job right on its first op | next job's first success after the fault |")
    print("|---|---:|---|---|---:|---|")
    for fault in FAULTS:
        of = [round_ for round_ in rounds if round_.fault == fault]
        if not of:
            continue
        survivors = [value for round_ in of for value in round_.survivor_latencies]
        gone = [round_.all_gone_after for round_ in of if round_.all_gone_after is not None]
        after = [round_.next_after for round_ in of if round_.next_after is not None]
        print(f"| {fault} | {len(of)} | {ms(survivors)} | {ms(gone)} "
              f"| {sum(round_.next_ok for round_ in of)} of {len(of)} | {ms(after)} |")
    next_ops = [round_.next_op_s for round_ in rounds if round_.next_op_s is not None]
    print(f"\njobs started: {len(jobs)} (struck {len(rounds)}, second {mix['second']}, "
          f"next {len(rounds)})")
    print(f"next jobs right on their first op: {next_ok} of {len(rounds)} "
          f"(the op itself: {ms(next_ops)})")
    print(f"ops: {len(ops)} finished: {outcomes['right']} right, "
          f"{outcomes['failed']} failed clearly, {outcomes['unclear']} failed unclearly, "
          f"{outcomes['wrong']} wrong")
    print("errors by class, each with an example:" if errors else "errors: none")
    for name, count in errors.most_common():
        print(f"  {name} {count}: {examples[name]}")
    seconds = [round_ for round_ in rounds if round_.fault == "second"]
    if seconds:
        print(f"second job: {len(seconds)} rounds; the first job failed in "
              f"{sum(failed_in(round_.jobs[0]) for round_ in seconds)}, the second in "
              f"{sum(failed_in(round_.jobs[1]) for round_ in seconds)}, the second ran ops "
              f"right in {sum(right_in(round_.jobs[1]) for round_ in seconds)}")
    print(f"survivors' error after a kill: {len(latencies)} survivors, {ms(latencies)}; "
          f"{naming} naming the killed rank")


def targets_missed(rounds: list[Round]) -> list[str]:
    """Each round's problems, and every op wrong or failed unclearly."""
    jobs = [job for round_ in rounds for job in round_.jobs]
    missed = [f"round {round_.index} ({round_.fault}): {problem}"
              for round_ in rounds for problem in round_.problems]
    missed += [f"wrong: job {job.name} rank {rank} op {op['index']} {op['kind']} "
               f"{op['count']} {op['dtype']} {op['op']}: {op['detail']}"
               for job in jobs for rank, process in enumerate(job.ranks)
               for op in process.ops() if op["outcome"] == "wrong"]
    missed += [f"unclear: job {job.name} rank {rank} op {op['index']}: {op['error']} "
               f"'{op['message']}'"
               for job in jobs for rank, process in enumerate(job.ranks)
               for op in process.ops() if op["outcome"] == "unclear"]
    return missed


def report(rounds: list[Round], args: argparse.Namespace) -> list[str]:
    """Prints the figures, the notes and the targets missed; returns the latter."""
    print_figures(rounds, args)
    notes = [f"round {round_.index} ({round_.fault}): {note}"
             for round_ in rounds for note in round_.notes]
    if notes:
        print(f"notes ({len(notes)}):")
        for line in notes:
            print(f"  {line}")
    missed = targets_missed(rounds)
    print(f"targets: {'met' if not missed else f'{len(missed)} missed'}")
    for line in missed:
        print(f"  {line}")
    return missed


# ---------------------------------------------------------------------------------------------


def parse_arguments() -> argparse.Namespace:
    default_bin = os.environ.get(
        "GRADSYNC_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../build/bin"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bin", default=default_bin, help="where `gradsync` is")
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="which faults to draw from (comma list of " + ", ".join(FAULTS) + ")")
    parser.add_argument("--max-survivor-error-s", type=float, default=1.0,
                        help="target: a kill's survivors fail within this")
    parser.add_argument("--max-delay-s", type=float, default=2.5,
                        help="a fault strikes up to this long after its job started")
    parser.add_argument("--op-timeout", type=float, default=10.0, help="every op's, in seconds")
    parser.add_argument("--start-timeout", type=float, default=30.0,
                        help="for a job's processes to connect")
    parser.add_argument("--keep-logs", help="copy the daemons' logs here (also done, to a "
                                            "fresh directory, when a target is missed)")
    # A rank process's own arguments.
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--socket", help=argparse.SUPPRESS)
    parser.add_argument("--plan-seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=1 << 30, help=argparse.SUPPRESS)
    parser.add_argument("--duration-s", type=float, default=60.0, help=argparse.SUPPRESS)
    parser.add_argument("--first-op-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--linger-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    faults = args.faults.split(",")
    if not faults or any(fault not in FAULTS for fault in faults):
        parser.error(f"--faults takes a comma list of {', '.join(FAULTS)}")
    args.fault_list = faults
    return args


def run_rounds(group: LocalGroup, args: argparse.Namespace) -> list[Round]:
    rng = random.Random(args.seed)
    rounds: list[Round] = []
    for index in range(args.rounds):
        round_ = Round(index, rng.choice(args.fault_list))
        rounds.append(round_)
        try:
            STRIKES[round_.fault](round_, group, args, rng)
            run_next_job(round_, group, args, rng)
        finally:
            for job in round_.jobs:
                job.kill_all()
                job.wait_gone(10)
                check_identity(round_, job)
        print(f"round {index}: {round_.fault}"
              + (f" rank {round_.victim}" if round_.victim is not None else "")
              + f", next job {'right' if round_.next_ok else 'NOT right'}"
              + (f" {round_.next_after * 1e3:.0f} ms after" if round_.next_after else "")
              + "".join(f"\n  {problem}" for problem in round_.problems)
              + "".join(f"\n  note: {note}" for note in round_.notes), flush=True)
        if not group.alive():
            round_.problems.append("gradsync local ended:\n" + "".join(group.output[-20:]))
            break
    return rounds


def main() -> int:
    args = parse_arguments()
    if args.rank_worker:
        return rank_worker(args)
    # SIGTERM ends the run as Ctrl-C does: through the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    group = LocalGroup(args.bin)
    print(f"gradsync local: {group.directory}", flush=True)
    try:
        rounds = run_rounds(group, args)
        missed = report(rounds, args)
        logs = args.keep_logs or (tempfile.mkdtemp(prefix="job-chaos-logs-") if missed else None)
        if logs:
            group.copy_logs(logs)
            print(f"daemon logs: {logs}")
        return 1 if missed else 0
    finally:
        group.stop()


if __name__ == "__main__":
    sys.exit(main())

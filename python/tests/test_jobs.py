"""Jobs and op streams (docs/clients.md, "Jobs"): several clients of a process pair by stream, a
daemon serves one job at a time and tells another job so, a client waits for its daemon to
start, and a client that closes ends its stream on every rank."""
import os
import secrets
import subprocess
import threading
import time

import numpy as np
import pytest

import gradsync
from conftest import BIN


def second_clients(group):
    """A second client of every rank, of the same job as the group's own."""
    return [gradsync.Client(socket, local_rank=group.sockets[:rank].count(socket))
            for rank, socket in enumerate(group.sockets)]


def test_two_clients_of_a_process_are_two_streams_of_one_job(group2):
    seconds = second_clients(group2)
    for first, second in zip(group2.clients, seconds):
        assert second.job == first.job
        assert second.stream != first.stream

    # Rank r gives r + 1 plus an offset no other op of the body gives: a pairing of one client's
    # op with the other's shows in the sum.
    def body(rank, first):
        second = seconds[rank]
        sums = []
        for round in range(3):
            for client, offset in ((first, 100 * round), (second, 100 * round + 10)):
                data = np.full(8, float(offset + rank + 1), dtype=np.float32)
                client.allreduce(data)
                sums.append((data, 2 * offset + 3))
        return sums

    for sums in group2.on_every_rank(body):
        for data, expected in sums:
            np.testing.assert_array_equal(data, np.full(8, expected, dtype=np.float32))


# A daemon takes every op its clients have published before it runs any, and runs a process's ops
# of several streams in the order the process submitted them (docs/clients.md, "Jobs").
def test_two_clients_ops_in_flight_at_once_each_pair_with_their_own(group2):
    # Every rank submits in the same order, but through two sockets: a daemon may read the two
    # clients' ops in either order.
    seconds = second_clients(group2)

    def body(rank, first):
        works, sums = [], []
        for round in range(4):
            for client, offset in ((first, 100 * round), (seconds[rank], 100 * round + 10)):
                data = np.full(1000, float(offset + rank + 1), dtype=np.float32)
                works.append(client.allreduce_async(data, timeout=10))
                sums.append((data, 2 * offset + 3))
        for work in works:
            work.wait()
        return sums

    for sums in group2.on_every_rank(body):
        for data, expected in sums:
            np.testing.assert_array_equal(data, np.full(1000, expected, dtype=np.float32))


def test_two_jobs_that_each_hold_one_daemon_fail_every_op_naming_the_other(group2):
    # Job A holds daemon 0 and job B daemon 1 before the other client of each arrives: neither
    # job can run there, and no op may sum A's values with B's.
    values = {"A": 1.0, "B": 100.0}
    clients = {(job, rank): gradsync.Client(group2.sockets[rank], job=job)
               for job in values for rank in range(2)}
    outcomes = {}

    def submit(job, rank):
        data = np.full(16, values[job], dtype=np.float32)
        started = time.monotonic()
        work = clients[job, rank].allreduce_async(data, timeout=5)

        def wait():
            try:
                work.wait()
                outcomes[job, rank] = (time.monotonic() - started, None, data)
            except gradsync.Error as error:
                outcomes[job, rank] = (time.monotonic() - started, error, data)

        thread = threading.Thread(target=wait)
        thread.start()
        return thread

    # A daemon answers status() only between ops, so which job holds it is asked afterwards; a
    # pause lets each daemon read the first op before the other job's arrives.
    threads = [submit("A", 0)]
    time.sleep(0.5)
    threads.append(submit("B", 1))
    time.sleep(0.5)
    threads += [submit("B", 0), submit("A", 1)]
    for thread in threads:
        thread.join(timeout=30)
    assert len(outcomes) == 4, f"ops not done within 30 s: {set(clients) - set(outcomes)}"
    # The group's own clients, of the process's own job, submit nothing.
    assert [client.status()["job"] for client in group2.clients] == ["A", "B"]
    for (job, rank), (seconds, error, data) in sorted(outcomes.items()):
        other = "B" if job == "A" else "A"
        what = f"job {job}'s op on rank {rank}"
        assert seconds < 8, f"{what} took {seconds:.1f} s: {error}"
        if error is None:
            np.testing.assert_array_equal(data, np.full(16, 2 * values[job], dtype=np.float32))
        assert error is not None, f"{what} ran, with job {other} holding a daemon"
        if isinstance(error, gradsync.DeadlineExceeded):
            # The first op of each job may wait for the other daemon, which ran the other job's
            # op meanwhile and read the refused client's op only once that was over: it fails at
            # its deadline, naming the other job by its tag.
            assert (job, rank) in (("A", 0), ("B", 1)), f"{what}: {error!r}"
            assert "ran ops of another job meanwhile" in str(error), f"{what}: {error}"
            continue
        assert isinstance(error, gradsync.Mismatch), f"{what}: {error!r}"
        assert f"'{other}'" in str(error) and f"'{job}'" in str(error), f"{what}: {error}"


class LoneDaemon:
    """A coordinator and one worker serving `socket`, which only exists once the worker has
    started."""

    def __init__(self, directory, socket):
        daemon = os.path.join(BIN, "gradsyncd")
        secret = os.path.join(directory, "secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(secrets.token_hex(32) + "\n")
        ready = os.path.join(directory, "coordinator")
        self.processes = [subprocess.Popen(
            [daemon, "coordinator", "--listen", "127.0.0.1:0", "--world-size", "1",
             "--secret-file", secret, "--ready-file", ready],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        deadline = time.monotonic() + 10
        while not (os.path.exists(ready) and open(ready).read().strip()):
            assert time.monotonic() < deadline, "the coordinator did not start within 10 s"
            time.sleep(0.01)
        self.processes.append(subprocess.Popen(
            [daemon, "worker", "--coordinator", open(ready).read().strip(), "--listen",
             "127.0.0.1:0", "--socket", socket, "--secret-file", secret],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self):
        for process in reversed(self.processes):
            process.terminate()
            process.wait(timeout=30)


def test_a_client_waits_for_its_daemon_to_start(tmp_path):
    socket = str(tmp_path / "worker.sock")
    connected = []

    def connect():
        try:
            connected.append(gradsync.Client(socket, timeout=10))
        except gradsync.Error as error:
            connected.append(error)

    thread = threading.Thread(target=connect)
    thread.start()
    time.sleep(1)
    assert thread.is_alive(), f"the client did not wait for the daemon: {connected}"
    daemon = LoneDaemon(str(tmp_path), socket)
    try:
        thread.join(timeout=20)
        assert isinstance(connected[0], gradsync.Client), connected[0]
        client = connected[0]
        assert (client.rank, client.world_size) == (0, 1)
        data = np.arange(4, dtype=np.float32)
        client.allreduce(data)
        np.testing.assert_array_equal(data, np.arange(4, dtype=np.float32))
        client.close()
    finally:
        daemon.stop()


def test_a_client_that_no_daemon_answers_in_time_says_it_waited_for_one(tmp_path):
    socket = str(tmp_path / "nobody.sock")
    started = time.monotonic()
    with pytest.raises(TimeoutError) as raised:
        gradsync.Client(socket, timeout=0.3)
    waited = time.monotonic() - started
    assert isinstance(raised.value, gradsync.DeadlineExceeded)
    assert f"no gradsync daemon served {socket} within 300 ms" in str(raised.value)
    assert 0.3 <= waited < 2, waited


def test_a_closed_client_refuses_every_op(group2):
    with gradsync.Client(group2.sockets[0]) as client:
        pass
    group2.clients[1].close()
    for closed in (client, group2.clients[1]):
        with pytest.raises(gradsync.InvalidArgument, match="closed"):
            closed.allreduce(np.zeros(4, dtype=np.float32))


def test_a_client_that_closes_fails_the_op_another_rank_waits_for_it_at_once(group2):
    waiting, leaving = group2.clients
    group2.on_every_rank(lambda rank, client: client.barrier())  # both have submitted
    work = waiting.allreduce_async(np.zeros(4, dtype=np.float32), timeout=30)
    time.sleep(0.3)  # the op waits in rank 0's daemon
    closed = time.monotonic()
    leaving.close()
    with pytest.raises(gradsync.Aborted) as raised:
        work.wait()
    assert time.monotonic() - closed < 1
    message = str(raised.value)
    assert "rank 1's client" in message and "left" in message, message

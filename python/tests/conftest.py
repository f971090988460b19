"""Real gradsync groups for the Python tests: `gradsync local` started by the test itself, one
Client per rank, each rank's calls on a thread of its own (a rank waits for the others inside
every collective, without the GIL)."""
import os
import signal
import subprocess
import threading

import numpy as np
import pytest

import gradsync

BIN = os.environ.get("GRADSYNC_BIN", os.path.join(os.path.dirname(__file__), "../../build/bin"))


class Group:
    """`gradsync local --workers p --local-ranks l` for the length of a test module or test;
    sockets lists each worker's once for each of its local ranks, in rank order."""

    def __init__(self, workers, local_ranks=1):
        self.process = subprocess.Popen(
            [os.path.join(BIN, "gradsync"), "local", "--workers", str(workers),
             "--local-ranks", str(local_ranks)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        ranks = workers * local_ranks
        self.sockets = []
        for line in self.process.stdout:
            if line.startswith("rank "):
                self.sockets.append(line.split(": ", 1)[1].strip())
            if len(self.sockets) == ranks:
                break
        if len(self.sockets) != ranks:
            self.stop()
            raise RuntimeError("gradsync local did not start")
        self.clients = [gradsync.Client(socket, local_rank=self.sockets[:rank].count(socket))
                        for rank, socket in enumerate(self.sockets)]

    @property
    def size(self):
        return len(self.sockets)

    def on_every_rank(self, body):
        """Runs body(rank, client) on one thread per rank; returns the results by rank, or
        raises the first rank's exception."""
        results = [None] * self.size
        errors = [None] * self.size

        def run(rank):
            try:
                results[rank] = body(rank, self.clients[rank])
            except BaseException as error:  # noqa: B902 (handed to the test's thread)
                errors[rank] = error

        threads = [threading.Thread(target=run, args=(rank,)) for rank in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        hung = [rank for rank, thread in enumerate(threads) if thread.is_alive()]
        if hung:
            raise AssertionError(f"ranks {hung} did not finish within 120 s")
        for error in errors:
            if error is not None:
                raise error
        return results

    def expect_every_rank_serves(self):
        """An all-reduce on every rank gives the sum: what a test of a failed op ends with."""
        def body(rank, client):
            data = np.ones(4, dtype=np.float32)
            client.allreduce(data)
            return data

        for data in self.on_every_rank(body):
            np.testing.assert_array_equal(data, np.full(4, float(self.size), dtype=np.float32))

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def group3():
    group = Group(3)
    yield group
    group.stop()


@pytest.fixture
def group2():
    group = Group(2)
    yield group
    group.stop()


@pytest.fixture
def hosts2x2():
    """Two daemons of two local ranks each."""
    group = Group(2, local_ranks=2)
    yield group
    group.stop()

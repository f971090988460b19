"""The training example (examples/train_digits.py) runs as a user runs it, under `gradsync
local`: it trains, keeps every rank's parameters identical and matches one process's loss."""
import os
import random
import socket
import subprocess
import sys

from conftest import BIN

EXAMPLE = os.path.join(os.path.dirname(__file__), "../../examples/train_digits.py")


def test_ddp_over_gradsync_trains_the_digits_like_one_process():
    result = subprocess.run(
        [os.path.join(BIN, "gradsync"), "local", "--workers", "2", "--", sys.executable, EXAMPLE,
         "--epochs", "3"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "epoch 3: loss" in result.stdout, result.stdout
    assert "every rank held the same parameters after every step" in result.stdout
    accuracy = float(result.stdout.split("test accuracy ")[1].split("%")[0])
    assert accuracy > 80.0, result.stdout
    assert "largest difference" in result.stdout, result.stdout


def test_gradients_sent_as_bf16_train_to_the_single_process_accuracy():
    result = subprocess.run(
        [os.path.join(BIN, "gradsync"), "local", "--workers", "2", "--", sys.executable, EXAMPLE,
         "--epochs", "3", "--wire", "bf16"], capture_output=True, text=True, timeout=300)
    # The example itself fails unless the accuracy is within half a point of one process's.
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gradients sent as bf16" in result.stdout, result.stdout
    assert "test accuracy of the single process" in result.stdout, result.stdout


def free_port_outside_the_ephemeral_range():
    """A free port for MASTER_PORT. One the kernel picks (bind to port 0) is from the range it
    hands out to every socket bound that way, and the tests running beside this one (daemons
    among them) may take it before torch does: rank 0's store then cannot listen, and rank 1
    waits on whatever took it."""
    for port in random.sample(range(20000, 30000), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port from 20000 to 29999")


def test_ranks_started_with_torchs_environment_meet_at_master_addr(group2):
    port = free_port_outside_the_ephemeral_range()
    ranks = []
    for rank in range(2):
        env = dict(os.environ, GRADSYNC_SOCKETS=",".join(group2.sockets), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        ranks.append(subprocess.Popen([sys.executable, EXAMPLE, "--epochs", "2"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = [rank.communicate(timeout=300)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    assert "epoch 2: loss" in outputs[0], outputs[0]
    assert "every rank held the same parameters after every step" in outputs[0]

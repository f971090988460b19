"""The training example (examples/train_digits.py) runs as a user runs it, under `gradsync
local`: it trains, keeps every rank's parameters identical and matches one process's loss."""
import os
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


def test_ranks_started_with_torchs_environment_meet_at_master_addr(group2):
    with socket.socket() as probe:  # a free port for MASTER_PORT
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
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

"""The training example (examples/train_digits.py) runs as a user runs it, under `gradsync
local`: it trains, keeps every rank's parameters identical and matches one process's loss."""
import os
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

"""The "gradsync" torch.distributed backend, every rank a process of its own as under torchrun:
every collective, DDP against DDP over gloo, a rank that does not match its daemon's, process
groups beside the default one, and a second init_process_group in the same processes."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_ranks(group, tmp_path, env_for_rank=lambda rank: {}, scenario="everything"):
    """Each rank's output, once torch_rank.py has run `scenario` on every rank."""
    init_file = str(tmp_path / "init")
    ranks = []
    for rank in range(group.size):
        env = dict(os.environ, GRADSYNC_SOCKETS=",".join(group.sockets), LOCAL_RANK=str(rank))
        env.update(env_for_rank(rank))
        ranks.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "torch_rank.py"), str(rank), str(group.size),
             init_file, scenario], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    return [rank.communicate(timeout=300)[0] for rank in ranks]


def test_every_collective_and_ddp_match_gloo_on_every_rank(group2, tmp_path):
    for output in run_ranks(group2, tmp_path):
        assert output.strip().endswith("ok"), output


def test_a_process_whose_daemon_has_another_rank_is_told_so(group2, tmp_path):
    outputs = run_ranks(group2, tmp_path, lambda rank: {"LOCAL_RANK": str(1 - rank)})
    for output in outputs:
        assert "talks to a gradsync daemon of rank" in output, output


def test_every_collective_and_ddp_match_gloo_with_two_ranks_per_daemon(hosts2x2, tmp_path):
    # GRADSYNC_SOCKETS lists each daemon twice: LOCAL_RANK 3 is the second daemon's local rank 1.
    for output in run_ranks(hosts2x2, tmp_path):
        assert output.strip().endswith("ok"), output


def test_a_new_group_of_every_rank_and_the_default_group_interleave_their_ops(group2, tmp_path):
    # Each group is an op stream of the job: its ops pair with its own on the other rank, never
    # with the other group's that this rank submitted just before.
    for output in run_ranks(group2, tmp_path, scenario="groups"):
        assert output.strip().endswith("ok"), output


def test_ops_of_two_groups_in_flight_at_once_each_pair_with_their_own(group2, tmp_path):
    # Every rank submits them in the same order, but through two clients: a daemon may read them
    # in either order.
    for output in run_ranks(group2, tmp_path, scenario="groups_in_flight"):
        assert output.strip().endswith("ok"), output


def test_groups_of_some_ranks_involve_their_members_only(group2, hosts2x2, tmp_path):
    # At p = 2 the last rank alone (torch's new_group([1])); at 2 hosts of 2 ranks, pairs on one
    # host each at once, and ranks 1 and 2 across the hosts.
    for group, where in ((group2, "p2"), (hosts2x2, "2x2")):
        (tmp_path / where).mkdir()
        for output in run_ranks(group, tmp_path / where, scenario="subgroups"):
            assert output.strip().endswith("ok"), output


def test_a_second_init_process_group_in_the_same_processes_is_a_new_job(group2, tmp_path):
    # The first job's clients must not keep the ranks' streams from the second's.
    for output in run_ranks(group2, tmp_path, scenario="reinit"):
        assert output.strip().endswith("ok"), output

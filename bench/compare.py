#!/usr/bin/python3
"""Runs gradsync and its peers (Open MPI, Gloo, torch.distributed) side by side, interleaved
(A B A B ..., so that drift on a shared machine hits every system alike), on loopback and on the
emulated LAN of deploy/lan.sh, and writes docs/benchmarks/BENCHMARKS.md with the tables, the
ratio of gradsync to the best peer per size, the measured limits (iperf3, memcpy) and an SVG plot
per setup beside it.

    sudo bench/compare.py                 # the full run (p = 2, 4 and 8, loopback and 1 Gbit/s LAN)
    sudo bench/compare.py --quick         # a short sweep, one repetition, for a smoke test
    sudo bench/compare.py --ranks 8 --ranks-per-host 2   # 4 hosts x 2 ranks (docs/clusters.md)
    sudo bench/compare.py --collective gather --root 1 --ranks 4 --out BENCHMARKS-GATHER.md

Every collective but all-reduce is compared with Open MPI only (Gloo's and torch's programs time
all-reduce).

Needs root for the LAN, scripts/install_peers.sh for the peers, and a build (scripts/build.sh).
A peer whose program is missing is left out of the tables with a note saying so."""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(ROOT, "build", "bin")
LAN = os.path.join(ROOT, "deploy", "lan.sh")
# Where --out names its report (a path relative to this folder, or absolute); the plots go beside it.
REPORTS = os.path.join(ROOT, "docs", "benchmarks")
# gradsync with f32 values sent as bf16 (docs/clients.md, "Semantics"): compared with the peers'
# f32 busbw.
BF16_WIRE = "gradsync, bf16 wire"
TORCH = os.path.join(ROOT, "bench", "peers", "torch_allreduce.py")
NETNS_RSH = os.path.join(ROOT, "bench", "peers", "netns_rsh.sh")
BIND_RANK = os.path.join(ROOT, "bench", "peers", "bind_rank.sh")
SUBNET = "10.77.0"
SYSTEM_TIMEOUT = [300]  # seconds one system may take for one sweep (--timeout)


def progress(message):
    print(f"[compare {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(argv, env=None, timeout=3600):
    result = subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True,
                            text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n"
                           f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result.stdout


def cpu_of_rank(rank):
    """Every system's rank r runs on CPU r mod the CPU count, as gradsync local and deploy/lan.sh
    bind gradsync's workers: binding alone is worth up to 1.5x at small sizes here, for Open MPI as
    for gradsync, so a comparison binds all or none."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[rank % len(cpus)]


def spawn_ranks(argv_of_rank, env_of_rank, netns_of_rank=None, timeout=None):
    """Starts one process per rank, bound to cpu_of_rank, and waits for all, at most `timeout`
    seconds (--timeout); raises if any fails or the time runs out, killing every rank first."""
    timeout = timeout or SYSTEM_TIMEOUT[0]
    processes = []
    for rank, argv in enumerate(argv_of_rank):
        prefix = ["ip", "netns", "exec", netns_of_rank(rank)] if netns_of_rank else []
        prefix += ["taskset", "-c", str(cpu_of_rank(rank))]
        processes.append(subprocess.Popen(prefix + argv, env={**os.environ, **env_of_rank(rank)},
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
    try:
        deadline = time.monotonic() + timeout
        outputs = [process.communicate(timeout=max(deadline - time.monotonic(), 1))[0]
                   for process in processes]
    except subprocess.TimeoutExpired:
        for process in processes:
            process.kill()
            process.wait()
        raise RuntimeError(f"{argv_of_rank[0][0]} timed out after {timeout} s")
    for rank, process in enumerate(processes):
        if process.returncode != 0:
            raise RuntimeError(f"rank {rank} of {argv_of_rank[0][0]} failed:\n{outputs[rank][-2000:]}")
    return outputs[0]


class Setup:
    """`ranks` ranks on `ranks // per_host` hosts, contiguous ranks on one host (as torchrun
    places them): gradsync runs one daemon per host serving its local ranks; the peers run one
    process per rank."""

    def __init__(self, name, ranks, collective, lan_rate=None, per_host=1):
        self.name, self.ranks, self.lan_rate, self.per_host = name, ranks, lan_rate, per_host
        self.collective = collective
        self.hosts = ranks // per_host

    def host_ns(self, rank):
        return f"gslan-h{rank // self.per_host}"

    def host(self, rank):
        return f"{SUBNET}.{rank // self.per_host + 1}" if self.lan_rate else "127.0.0.1"


def sweep_flags(options):
    return ["--min-bytes", "4", "--max-bytes", options.max_bytes, "--step-factor",
            str(options.step_factor), "--iters", str(options.iters), "--small-iters",
            str(options.small_iters), "--warmup", str(options.warmup)]


def collective_flags(options):
    return ["--collective", options.collective, "--root", str(options.root)]


def gradsync_rows(setup, options, json_path, wire=None):
    bench = ([os.path.join(BIN, "gradsync"), "bench", "--json", json_path] + sweep_flags(options)
             + collective_flags(options) + (["--wire", wire] if wire else []))
    per_host = ["--ranks-per-host", str(setup.per_host)]
    if setup.lan_rate:
        run([LAN, "run", "--hosts", str(setup.hosts), "--rate", setup.lan_rate] + per_host + ["--"]
            + bench)
    else:
        run([os.path.join(BIN, "gradsync"), "local", "--workers", str(setup.hosts)] + per_host
            + ["--"] + bench)


def mpi_rows(setup, options, json_path):
    rank_cpus = ",".join(str(cpu_of_rank(rank)) for rank in range(setup.ranks))
    # Ranks that share a host use Open MPI's shared-memory transport, as a user would, and on one
    # machine its hierarchical collectives too (coll/han crashed on the emulated LAN, signal 11).
    transport = ["--mca", "btl", "tcp,vader,self" if setup.per_host > 1 else "tcp,self"]
    if setup.per_host > 1 and not setup.lan_rate:
        transport += ["--mca", "coll_han_priority", "100"]
    # More ranks than CPUs: a rank that busy-polls takes the time slice of the rank it waits for.
    # mpirun sees that on one machine, but not across the LAN's hosts, whose CPUs are the same two.
    if setup.ranks > len(os.sched_getaffinity(0)):
        transport += ["--mca", "mpi_yield_when_idle", "1"]
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(setup.ranks),
              "--bind-to", "none", "-x", f"GRADSYNC_RANK_CPUS={rank_cpus}"] + transport
    program = ([BIND_RANK, os.path.join(BIN, "mpi_bench"), "--json", json_path] + sweep_flags(options)
               + collective_flags(options))
    if not setup.lan_rate:
        run(mpirun + ["--mca", "btl_tcp_if_include", "lo"] + program)
        return
    # mpirun runs on host 0 and starts a daemon on every other host through netns_rsh.sh.
    hosts = ",".join(f"{setup.host(rank)}:{setup.per_host}"
                     for rank in range(0, setup.ranks, setup.per_host))
    with_lan(setup, lambda: run(
        ["ip", "netns", "exec", setup.host_ns(0)] + mpirun +
        ["--host", hosts, "--mca", "plm_rsh_agent", NETNS_RSH, "--mca", "plm_rsh_no_tree_spawn",
         "1", "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0"] +
        program, timeout=SYSTEM_TIMEOUT[0]))


def with_lan(setup, body):
    if not setup.lan_rate:
        return body()
    run([LAN, "up", "--hosts", str(setup.hosts), "--rate", setup.lan_rate])
    try:
        return body()
    finally:
        run([LAN, "down"])


def gloo_rows(algorithm):
    def rows(setup, options, json_path):
        store = tempfile.mkdtemp(prefix="gradsync-gloo-")
        argv = [os.path.join(BIN, "gloo_allreduce"), "--algorithm", algorithm, "--json",
                json_path] + sweep_flags(options)
        env = lambda rank: {"RANK": str(rank), "WORLD_SIZE": str(setup.ranks),
                            "GLOO_STORE": store, "GLOO_HOSTNAME": setup.host(rank)}
        try:
            with_lan(setup, lambda: spawn_ranks([argv] * setup.ranks, env,
                                                setup.host_ns if setup.lan_rate else None))
        finally:
            shutil.rmtree(store, ignore_errors=True)
    return rows


def torch_rows(setup, options, json_path):
    store = tempfile.mktemp(prefix="gradsync-torch-")
    argv = ["/usr/bin/python3", TORCH, "--json", json_path] + sweep_flags(options)
    env = lambda rank: {"RANK": str(rank), "WORLD_SIZE": str(setup.ranks), "TORCH_STORE": store,
                        "GLOO_SOCKET_IFNAME": "eth0" if setup.lan_rate else "lo"}
    try:
        with_lan(setup, lambda: spawn_ranks([argv] * setup.ranks, env,
                                            setup.host_ns if setup.lan_rate else None))
    finally:
        if os.path.exists(store):
            os.remove(store)


# (name, program, rows, whether it times every collective or all-reduce only)
SYSTEMS = [
    ("gradsync", "gradsync", gradsync_rows, True),
    (BF16_WIRE, "gradsync", lambda setup, options, path: gradsync_rows(setup, options, path, "bf16"),
     False),
    ("Open MPI", "mpi_bench", mpi_rows, True),
    ("Gloo", "gloo_allreduce", gloo_rows("default"), False),
    ("Gloo ring_chunked", "gloo_allreduce", gloo_rows("ring_chunked"), False),
    ("Gloo halving_doubling", "gloo_allreduce", gloo_rows("halving_doubling"), False),
    ("torch.distributed (gloo)", None, torch_rows, False),
]


def available(program):
    if program is None:
        return subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"],
                              capture_output=True).returncode == 0
    if program == "mpi_bench" and shutil.which("mpirun") is None:
        return False
    return os.path.exists(os.path.join(BIN, program))


def measure(setups, options):
    """results[setup][system][bytes] = list of (time_us, wrong, algorithm, error), one per
    repetition (error: the wire type's measured error and its bound, else None)."""
    results = {setup.name: {} for setup in setups}
    notes = []
    timed = [(name, program, run_rows) for name, program, run_rows, every in SYSTEMS
             if every or options.collective == "allreduce"]
    systems = [(name, run_rows) for name, program, run_rows in timed if available(program)]
    for name, program, _ in timed:
        if not available(program):
            notes.append(f"{name}: not installed here (scripts/install_peers.sh), left out")
    for repetition in range(options.repetitions):
        for setup in setups:
            for name, run_rows in systems:
                progress(f"repetition {repetition + 1}/{options.repetitions}: {setup.name}: {name}")
                with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as file:
                    json_path = file.name
                try:
                    run_rows(setup, options, json_path)
                    with open(json_path) as file:
                        rows = json.load(file)
                except (RuntimeError, subprocess.TimeoutExpired) as failure:
                    notes.append(f"{name} on {setup.name}, repetition {repetition + 1}: "
                                 f"failed: {str(failure).splitlines()[0]}")
                    continue
                finally:
                    os.remove(json_path)
                per_size = results[setup.name].setdefault(name, {})
                for row in rows:
                    per_size.setdefault(row["bytes"], []).append(
                        (row["time_us"], row["wrong"], row.get("algorithm", ""),
                         (row["error"], row["error_bound"]) if "error" in row else None))
    return results, notes


def bus_factor(collective, hosts):
    """nccl-tests' busbw over algbw, as cli/bench_report.h's bus_factor() counts it."""
    if collective == "allreduce":
        return 2 * (hosts - 1) / max(hosts, 1)
    if collective in ("broadcast", "reduce", "pingpong"):  # pingpong: one way, one link
        return 1
    return (hosts - 1) / max(hosts, 1)


def busbw(bytes_, time_us, setup):
    """Over the links between hosts: ranks on one host add no traffic to the network."""
    return bytes_ / time_us / 1e3 * bus_factor(setup.collective, setup.hosts)


def limits(options):
    found = {}
    try:
        output = run([os.path.join(BIN, "reduce_kernels_bench"), "--benchmark_filter=memcpy",
                      "--benchmark_min_time=0.5", "--benchmark_format=json"])
        found["memcpy 64 MiB"] = json.loads(output)["benchmarks"][0]["bytes_per_second"] / 1e9
    except (RuntimeError, FileNotFoundError, KeyError, IndexError):
        pass
    if shutil.which("iperf3") is None:
        return found
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        report = json.loads(run(["iperf3", "-c", "127.0.0.1", "-t", "3", "-J"]))
        found["iperf3 loopback, one stream"] = report["end"]["sum_received"]["bits_per_second"] / 8e9
    finally:
        server.wait(timeout=10)
    if options.lan:
        run([LAN, "up", "--hosts", "2", "--rate", options.rate])
        try:
            server = subprocess.Popen(["ip", "netns", "exec", "gslan-h0", "iperf3", "-s", "-1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            report = json.loads(run(["ip", "netns", "exec", "gslan-h1", "iperf3", "-c",
                                     f"{SUBNET}.1", "-t", "5", "-J"]))
            found[f"iperf3 over the emulated LAN ({options.rate})"] = (
                report["end"]["sum_received"]["bits_per_second"] / 8e9)
            server.wait(timeout=10)
        finally:
            run([LAN, "down"])
    return found


def svg_plot(setup, systems):
    """busbw against size, log x, one polyline per system."""
    width, height, left, bottom, top, right = 720, 400, 60, 40, 20, 200
    points = [(b, v) for series in systems.values() for b, v in series]
    if not points:
        return ""
    xs = [b for b, _ in points]
    import math
    x_low, x_high = math.log2(min(xs)), math.log2(max(xs))
    y_high = max(v for _, v in points) * 1.1 or 1
    scale_x = lambda b: left + (math.log2(b) - x_low) / max(x_high - x_low, 1) * (width - left - right)
    scale_y = lambda v: height - bottom - v / y_high * (height - bottom - top)
    colors = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="14">{setup.name}: {setup.collective} busbw (GB/s) against size</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>']
    for exponent in range(int(x_low), int(x_high) + 1, 4):
        x = scale_x(2 ** exponent)
        label = f"{2 ** exponent}" if exponent < 10 else (f"{2 ** (exponent - 10)}K" if exponent < 20 else f"{2 ** (exponent - 20)}M")
        parts.append(f'<text x="{x:.0f}" y="{height - bottom + 14}" text-anchor="middle">{label}</text>')
    for step in range(5):
        value = y_high * step / 4
        parts.append(f'<text x="{left - 6}" y="{scale_y(value) + 4:.0f}" text-anchor="end">{value:.2f}</text>')
    for index, (name, series) in enumerate(systems.items()):
        color = colors[index % len(colors)]
        line = " ".join(f"{scale_x(b):.1f},{scale_y(v):.1f}" for b, v in sorted(series))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{line}"/>')
        parts.append(f'<text x="{width - right + 10}" y="{top + 16 * index + 10}" fill="{color}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def report(setups, results, notes, found, options, command):
    lines = ["# Benchmarks", "",
             f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M')}. Regenerate with that "
             "command; every number below comes from this run.", "",
             "## The machine", "",
             f"- {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
             f"Linux {platform.release()}",
             f"- {options.collective}" + (f" from root {options.root}" if options.collective
                                           in ("broadcast", "reduce", "gather", "scatter") else "")
             + f", f32 sum; {options.iters} timed iterations per size ({options.small_iters} "
             f"up to 64 KiB, whose short ops give a noisy median over few) after {options.warmup} "
             f"warm-up; time = median over iterations of the op's time from the first rank's start to the "
             f"last rank's end (one clock: the machine's wall clock), then the median over "
             f"{options.repetitions} interleaved repetitions; busbw = bytes/time · nccl-tests' factor "
             f"for the collective (all-reduce 2(H−1)/H, broadcast and reduce 1, the others "
             f"(H−1)/H) over the H hosts' links (H = p with one rank per host).",
             "- every system's rank r runs on CPU r mod the CPU count (gradsync's workers by "
             "gradsync local and deploy/lan.sh, their bench threads beside them; the peers' ranks "
             "by taskset).", ""]
    if found:
        lines += ["## Measured limits", ""] + [f"- {name}: {value:.4f} GB/s" for name, value in found.items()] + [""]
    for setup in setups:
        systems = results[setup.name]
        if not systems:
            continue
        sizes = sorted({b for per_size in systems.values() for b in per_size})
        names = list(systems)
        # The LAN targets are against what one TCP stream gets over the same link.
        goodput = found.get(f"iperf3 over the emulated LAN ({setup.lan_rate})") if setup.lan_rate else None
        wire = BF16_WIRE in names
        lines += [f"## {setup.name}", "", f"![busbw]({options.plot_prefix}-{setup.name.replace(' ', '-').replace(',', '').replace('=', '')}.svg)", "",
                  "| size | " + " | ".join(f"{n} µs (busbw)" + (" algorithm" if n.startswith("gradsync") else "") for n in names)
                  + " | gradsync / best peer (time) |" + (" gradsync busbw / iperf3 |" if goodput else "")
                  + (" bf16 wire busbw / best peer's | bf16 wire error (bound) |" if wire else ""),
                  "|---:|" + "---:|" * len(names) + "---:|" + ("---:|" if goodput else "")
                  + ("---:|---:|" if wire else "")]
        series = {n: [] for n in names}
        for size in sizes:
            cells, medians = [], {}
            for name in names:
                samples = systems[name].get(size)
                if not samples:
                    cells.append("–")
                    continue
                median = statistics.median(t for t, _, _, _ in samples)
                wrong = sum(w for _, w, _, _ in samples)
                # What gradsync's planner chose, so a reader can tell a slow size's algorithm.
                chosen = sorted({a.removeprefix("auto:") for _, _, a, _ in samples if a.startswith("auto:")})
                medians[name] = median
                series[name].append((size, busbw(size, median, setup)))
                cells.append(f"{median:.1f} ({busbw(size, median, setup):.4f})"
                             + (f" {'/'.join(chosen)}" if chosen else "")
                             + (f" **{wrong} wrong**" if wrong else ""))
            peers = [t for n, t in medians.items() if not n.startswith("gradsync")]
            ratio = f"{medians['gradsync'] / min(peers):.2f}" if "gradsync" in medians and peers else "–"
            row = f"| {size} | " + " | ".join(cells) + f" | {ratio} |"
            if goodput:
                row += (f" {busbw(size, medians['gradsync'], setup) / goodput:.3f} |"
                        if "gradsync" in medians else " – |")
            if wire:
                errors = [e for _, _, _, e in systems[BF16_WIRE].get(size, []) if e is not None]
                row += (f" {min(peers) / medians[BF16_WIRE]:.2f} |" if BF16_WIRE in medians and peers
                        else " – |")
                row += (f" {max(errors)[0]:.2e} ({max(errors)[1]:.2e}) |" if errors else " – |")
            lines.append(row)
        lines.append("")
        plot = svg_plot(setup, series)
        path = os.path.join(os.path.dirname(report_path(options)), f"{options.plot_prefix}-{setup.name.replace(' ', '-').replace(',', '').replace('=', '')}.svg")
        with open(path, "w") as file:
            file.write(plot)
    if notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in notes] + [""]
    with open(report_path(options), "w") as file:
        file.write("\n".join(lines))


def report_path(options):
    return os.path.join(REPORTS, options.out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short sweep, one repetition")
    parser.add_argument("--no-lan", dest="lan", action="store_false", help="loopback only")
    parser.add_argument("--rate", default="1gbit", help="the LAN's link rate")
    parser.add_argument("--ranks", default="2,4,8", help="world sizes, comma-separated")
    parser.add_argument("--ranks-per-host", type=int, default=1,
                        help="contiguous ranks per host (gradsync: one daemon per host)")
    parser.add_argument("--repetitions", type=int, help="interleaved repetitions (default 3, quick 1)")
    parser.add_argument("--timeout", type=int, default=300,
                        help="seconds one peer may take for one sweep before it is left out")
    parser.add_argument("--out", default="BENCHMARKS.md",
                        help="the report, in docs/benchmarks/ (SVG plots beside it)")
    parser.add_argument("--plot-prefix", default="benchmarks")
    parser.add_argument("--collective", default="allreduce",
                        choices=["allreduce", "reduce_scatter", "allgather", "broadcast",
                                 "alltoall", "reduce", "gather", "scatter", "alltoallv",
                                 "pingpong"])
    parser.add_argument("--root", type=int, default=0, help="of the rooted collectives")
    options = parser.parse_args()
    SYSTEM_TIMEOUT[0] = options.timeout
    options.max_bytes, options.step_factor = ("1MiB", 64) if options.quick else ("64MiB", 4)
    options.iters, options.small_iters, options.warmup = (3, 3, 1) if options.quick else (10, 100, 3)
    if options.repetitions is None:
        options.repetitions = 1 if options.quick else 3
    if options.lan and os.geteuid() != 0:
        parser.error("the LAN needs root (or pass --no-lan)")
    ranks = [int(r) for r in options.ranks.split(",")]
    per_host = options.ranks_per_host
    if any(p % per_host for p in ranks):
        parser.error(f"--ranks-per-host {per_host} does not divide every --ranks")
    layout = lambda p: f"p={p}" if per_host == 1 else f"p={p}, {p // per_host}x{per_host}"
    setups = [Setup(f"loopback, {layout(p)}", p, options.collective, per_host=per_host)
              for p in ranks]
    if options.lan:
        setups += [Setup(f"LAN {options.rate}, {layout(p)}", p, options.collective, options.rate,
                         per_host) for p in ranks]
    results, notes = measure(setups, options)
    found = limits(options)
    report(setups, results, notes, found, options, "bench/compare.py " + " ".join(sys.argv[1:]))
    progress(f"wrote {report_path(options)}")


if __name__ == "__main__":
    main()

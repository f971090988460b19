#!/usr/bin/python3
"""What can be checked of the containers in a second, without building an image (container_test.sh
builds and runs it): docker-compose.yml parses, has a coordinator, one worker per rank and a bench
service, one service builds the image and every other runs it, every GRADSYNC_* variable it sets
is one the binaries declare, every service's command line is accepted by the real binaries
(--dry-run), and deploy/Dockerfile is multi-stage with only the daemon and the CLI in a non-root
final image."""
import os
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.environ["GRADSYNC_BIN"]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def declared_variables(program, subcommand):
    help_text = subprocess.run([os.path.join(BIN, program), subcommand, "--help"],
                               capture_output=True, text=True).stdout
    return set(re.findall(r"Env:\s*(GRADSYNC_[A-Z_]+)", help_text))


with open(os.path.join(ROOT, "docker-compose.yml")) as file:
    compose = yaml.safe_load(file)
services = compose["services"]
workers = sorted(name for name in services if name.startswith("worker"))
check("coordinator" in services, "no coordinator service")
check("bench" in services, "no bench service")
world_size = int(services["coordinator"]["environment"]["GRADSYNC_WORLD_SIZE"])
check(len(workers) == world_size,
      f"{len(workers)} worker services for a world size of {world_size}")
ranks = sorted(int(services[w]["environment"]["GRADSYNC_RANK"]) for w in workers)
check(ranks == list(range(world_size)), f"worker ranks {ranks}")
builders = [name for name, service in services.items() if "build" in service]
check(len(builders) == 1, f"the image is built by {builders}, not by one service")
images = {service.get("image") for service in services.values()}
check(images == {"gradsync"}, f"the services run the images {images}, not gradsync alone")
sockets = services["bench"]["environment"]["GRADSYNC_SOCKETS"].split(",")
check(sockets == [services[w]["environment"]["GRADSYNC_SOCKET"] for w in workers],
      "the bench's sockets are not the workers' sockets in rank order")

with open(os.path.join(ROOT, "deploy", "Dockerfile")) as file:
    dockerfile = file.read()
stages = re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)
check(len(stages) >= 2 and all(s.startswith("debian:12") for s in stages),
      f"not a multi-stage Debian 12 build: {stages}")
final = dockerfile[dockerfile.rindex("\nFROM"):]
check(re.search(r"^USER\s+(?!root)\S+", final, re.M) is not None, "the final image runs as root")
copies = re.findall(r"^COPY --from=build (.+) \S+$", final, re.M)
check(copies == ["/out/gradsyncd /out/gradsync"], f"final image copies {copies}")
entrypoint = re.search(r'^ENTRYPOINT \["([^"]+)"\]', final, re.M).group(1)
daemons = [name for name, service in services.items()
           if service.get("entrypoint", [entrypoint])[0] == "gradsyncd"]
check(all(service.get("environment", {}).get("GRADSYNC_SECRET_FILE") == "/run/secrets/gradsync"
          and "gradsync" in service.get("secrets", []) for name, service in services.items()
          if name in daemons), "a daemon service without the group secret")
SECRET = os.path.join(tempfile.mkdtemp(), "group.secret")
with open(os.open(SECRET, os.O_WRONLY | os.O_CREAT, 0o600), "w") as file:
    file.write("a secret for the dry runs, long enough\n")

for name, service in services.items():
    program = service.get("entrypoint", [entrypoint])[0]
    command = service["command"]
    environment = {k: str(v) for k, v in service.get("environment", {}).items()}
    known = declared_variables(program, command[0])
    for variable in environment:
        check(variable in known, f"{name}: {variable} is no flag of {program} {command[0]}")
    if program == "gradsyncd":
        argv = [os.path.join(BIN, program), "--dry-run"] + command
    else:
        argv = [os.path.join(BIN, program)] + command + ["--dry-run"]
    if "GRADSYNC_SECRET_FILE" in environment:  # a container's mounted secret, made here
        environment["GRADSYNC_SECRET_FILE"] = SECRET
    result = subprocess.run(argv, env={**os.environ, **environment}, capture_output=True,
                            text=True)
    check(result.returncode == 0,
          f"{name}: {' '.join(command)} was rejected: {result.stdout}{result.stderr}")

if failures:
    print("compose_test: FAILED\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"compose_test: {len(services)} services checked")

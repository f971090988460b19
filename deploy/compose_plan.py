#!/usr/bin/python3
"""Turns docker-compose.yml into the plan deploy/lan.sh runs on its emulated LAN: one host per
service, in file order, with the same command and environment, service names replaced by the host
addresses, the shared socket volume by a local folder, and the group secret by the file
group.secret in that folder (which deploy/lan.sh makes). Prints one line per service:
NAME<TAB>PROGRAM<TAB>KEY=VALUE ...<TAB>ARG ..."""
import re
import sys

import yaml

compose_file, subnet, volume_dir = sys.argv[1:4]
with open(compose_file) as file:
    services = yaml.safe_load(file)["services"]
with open(compose_file.replace("docker-compose.yml", "deploy/Dockerfile")) as file:
    default_program = re.findall(r'^ENTRYPOINT \["([^"]+)"\]', file.read(), re.M)[-1]
address = {name: f"{subnet}.{index + 1}" for index, name in enumerate(services)}


def localize(text):
    text = str(text).replace("/run/secrets/gradsync", volume_dir + "/group.secret")
    text = text.replace("/run/gradsync", volume_dir)
    for name, host in address.items():
        text = re.sub(rf"\b{re.escape(name)}:(\d+)", rf"{host}:\1", text)
    return text.replace("0.0.0.0:", "HOST:")


for name, service in services.items():
    program = service.get("entrypoint", [default_program])[0]
    environment = " ".join(
        f"{key}={localize(value).replace('HOST:', address[name] + ':')}"
        for key, value in service.get("environment", {}).items())
    print("\t".join([name, program, environment, " ".join(service["command"])]))

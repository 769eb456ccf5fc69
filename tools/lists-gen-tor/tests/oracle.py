#!/usr/bin/env python3
"""Independent oracle for lists-gen-tor: the unique exit addresses of a capture, with Python.

usage: oracle.py FILE   Prints them as /32 and /128 networks, IPv4 then IPv6, sorted.
"""
import ipaddress
import json
import sys

text = open(sys.argv[1], encoding="utf-8").read()
addresses = set()
if text.lstrip().startswith("{"):
    for relay in json.loads(text)["relays"]:
        if "Exit" not in relay.get("flags", []):
            continue
        v6_policy = relay.get("exit_policy_v6_summary")
        v6_exits = v6_policy is None or bool(v6_policy.get("accept"))
        addresses.update(ipaddress.ip_address(a) for a in relay.get("exit_addresses", []))
        for entry in relay.get("or_addresses", []):
            host = ipaddress.ip_address(entry.rsplit(":", 1)[0].strip("[]"))
            if host.version == 4 or v6_exits:
                addresses.add(host)
elif "ExitNode" in text:
    for line in text.splitlines():
        if line.startswith("ExitAddress "):
            addresses.add(ipaddress.ip_address(line.split()[1]))
else:
    addresses = {ipaddress.ip_address(l.strip()) for l in text.splitlines() if l.strip()}
for version in (4, 6):
    for address in sorted(a for a in addresses if a.version == version):
        print(ipaddress.ip_network(address))

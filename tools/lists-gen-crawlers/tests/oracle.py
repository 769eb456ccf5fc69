#!/usr/bin/env python3
"""Independent oracle for lists-gen-crawlers: Python's ipaddress over the same range files.

usage: oracle.py FILE...   Prints the union of their prefixes collapsed, one per line, IPv4
then IPv6, each family sorted by address, exactly as ipaddress.collapse_addresses returns them.
"""
import ipaddress
import json
import sys

nets = {4: [], 6: []}
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        for entry in json.load(f)["prefixes"]:
            text = entry.get("ipv4Prefix") or entry["ipv6Prefix"]
            net = ipaddress.ip_network(text, strict=False)
            nets[net.version].append(net)
for version in (4, 6):
    for net in ipaddress.collapse_addresses(nets[version]):
        print(net)

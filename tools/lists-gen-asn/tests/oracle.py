#!/usr/bin/env python3
"""Independent oracle for lists-gen-asn: Python's ipaddress over the same dataset.

usage: oracle.py FORMAT ASNS FILE...   (FORMAT: iptoasn | ip-location-db | geolite2;
ASNS: comma-separated). Prints the collapsed prefixes, one per line, IPv4 then IPv6, each
family sorted by address, exactly as ipaddress.collapse_addresses returns them.
"""
import csv
import gzip
import ipaddress
import sys


def rows(path, fmt):
    with open(path, "rb") as raw:
        magic = raw.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t" if fmt == "iptoasn" else ",")
        for row in reader:
            if not row or row[0] == "network":
                continue
            yield row


def main():
    fmt, asns, paths = sys.argv[1], {int(a) for a in sys.argv[2].split(",")}, sys.argv[3:]
    nets = {4: [], 6: []}
    for path in paths:
        for row in rows(path, fmt):
            if fmt == "geolite2":
                if int(row[1]) in asns:
                    net = ipaddress.ip_network(row[0])
                    nets[net.version].append(net)
            elif int(row[2]) in asns:
                first, last = ipaddress.ip_address(row[0]), ipaddress.ip_address(row[1])
                nets[first.version].extend(ipaddress.summarize_address_range(first, last))
    for version in (4, 6):
        for net in ipaddress.collapse_addresses(nets[version]):
            print(net)


main()

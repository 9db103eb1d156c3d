#!/usr/bin/env python3
"""Scrapes a Prometheus endpoint and parses it with Prometheus's own Python parser
(prometheus_client), so kilnd's /metrics is checked by a real reader of the format, not by
the code that wrote it. Prints JSON for the C++ test: the Content-Type, each family's type
and every sample. Usage: scrape_metrics.py URL | scrape_metrics.py --file PATH

Exits 1 (a failure, never a skip) when prometheus_client is missing: CI installs it
(deploy/install-deps.sh)."""
import json
import sys
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.stderr.write("scrape_metrics.py: the Python package prometheus_client is missing; "
                     "install it: python3 -m pip install prometheus-client (deploy/install-deps.sh does)\n")
    sys.exit(1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--file":
        with open(sys.argv[2], encoding="utf-8") as f:
            text, content_type = f.read(), ""
    elif len(sys.argv) == 2:
        with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
            text = response.read().decode("utf-8")
            content_type = response.headers.get("Content-Type", "")
    else:
        sys.stderr.write(__doc__)
        return 2
    families, samples = {}, []
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for s in family.samples:
            samples.append({"name": s.name, "labels": dict(s.labels), "value": s.value})
    json.dump({"content_type": content_type, "families": families, "samples": samples}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

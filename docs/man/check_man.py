#!/usr/bin/env python3
"""Checks the generated manual pages: each page's header and sections, and
that the options docs/cli.md lists made it into them."""
import os
import sys

pages = {os.path.basename(p).rsplit(".", 1)[0]: open(p).read() for p in sys.argv[1:]}
assert set(pages) == {"appliance-submit", "coordinator", "memoryx", "swarmx", "worker", "wse-node"}, pages.keys()
sub = pages["appliance-submit"]
assert sub.startswith('.TH "APPLIANCE-SUBMIT" "1"'), sub[:60]
for s in (".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH EXIT STATUS", "--detach", "--follow", "could not be reached",
          "--user", "--key-file", "--insecure", "APPLIANCE_INSECURE"):
    assert s in sub, s
for d in ("coordinator", "memoryx", "swarmx", "worker", "wse-node"):
    t = pages[d]
    assert t.startswith('.TH "%s" "8"' % d.upper()), d
    for s in (".SH NAME", ".SH DAEMON OPTIONS", "--metrics", "--secret-file", "--config", "--insecure",
              "--max-connections-per-address", "--auth-timeout-ms", "--max-queued-bytes"):
        assert s in t, (d, s)
assert "--wafer-memory" in pages["wse-node"] and "--heartbeat-timeout-ms" in pages["coordinator"]
for opt in ("--users-file", "--max-job-file", "--max-model-params", "--max-steps", "--max-queued-jobs",
            "--max-queued-per-submitter", "--max-job-history", "--max-client-backlog", "--chunk-size"):
    assert opt in pages["coordinator"], opt
print("man pages: %d checked" % len(pages))

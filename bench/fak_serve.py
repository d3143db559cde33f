"""Starting `fak serve` for the bench scripts: the server on a free port (read from its "listening
on" line), its later stderr drained so it never blocks on a full pipe."""
import re
import subprocess
import sys
import threading


def start(cmd, env=None):
    """Runs cmd (a `fak serve ... --port 0` command line); returns (process, port)."""
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    for line in p.stderr:
        m = re.search(r"listening on \S*:(\d+)", line)
        if m:
            threading.Thread(target=p.stderr.read, daemon=True).start()
            return p, int(m.group(1))
    p.kill()
    sys.exit("fak serve did not start")

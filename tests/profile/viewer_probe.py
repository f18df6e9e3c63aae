"""Run inside a private network namespace (`unshare -rn`): bring its loopback up, start the real
`xprof --logdir DIR --port PORT` the report names, ask it over HTTP for its runs and each run's tools,
print them as one JSON line, and stop it. xprof listens on every interface; in the namespace the only
interface is loopback, so nothing outside this machine (or outside the namespace) can reach it.

    unshare -rn python tests/profile/viewer_probe.py LOGDIR
"""

from __future__ import annotations

import fcntl
import gzip
import json
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

PORT, GRPC_PORT = 8791, 50051  # xprof's defaults, as a user runs it
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def get(path: str) -> object:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/data/plugin/profile{path}", timeout=30) as response:
        body = response.read()
        return json.loads(gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip" else body)


def main(logdir: str) -> int:
    loopback_up()
    xprof = Path(sys.executable).with_name("xprof")
    server = subprocess.Popen([str(xprof), "--logdir", logdir, "--port", str(PORT)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):  # xprof imports TensorFlow before it listens: up to 60 s
            if server.poll() is not None:
                print(json.dumps({"error": f"xprof exited {server.returncode}: {server.stderr.read()[-800:]}"}))
                return 1
            try:
                runs = get("/runs")
                break
            except OSError:
                time.sleep(0.1)
        else:
            print(json.dumps({"error": "xprof did not answer within 60 s"}))
            return 1
        tools = {run: get(f"/run_tools?run={urllib.parse.quote(run)}") for run in runs}  # type: ignore[union-attr]
        print(json.dumps({"runs": runs, "tools": tools}))
        return 0
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

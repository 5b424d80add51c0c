"""Peak memory of reading slurmrestd's node listing, against the agent unit's ``MemoryMax=512M``.

A server on 127.0.0.1 answers ``GET /slurm/v0.0.45/nodes/`` with N synthetic nodes shaped like
26.05's (about 3 KB of fields each: features, tres, energy, partitions, reasons ...). Each case
runs in a fresh interpreter, which reads the listing with :meth:`topocast.slurm.rest.SlurmRest.nodes`
and prints its peak RSS (``VmHWM``) less the RSS after imports:

* the listing of ``--nodes`` nodes (default 20,000, ~60 MB, near the 64 MiB cap);
* a 200 MiB answer (refused at the cap, so it costs at most the cap);
* for comparison, the same listing decoded whole with ``json.loads`` (what the client did before).

    .venv/bin/python bench/slurmrest_memory.py [--nodes 20000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHILD = r"""
import json, sys, urllib.request
from topocast.slurm.rest import SlurmRest, SlurmRestError
from topocast.slurm.rest_token import SlurmToken
def hwm():  # peak RSS in KiB (VmHWM: ru_maxrss is not kept up to date in every sandbox)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
base = hwm()
url, how = sys.argv[1], sys.argv[2]
try:
    if how == "json.loads":
        with urllib.request.urlopen(url + "/slurm/v0.0.45/nodes/") as r:
            n = len(json.loads(r.read())["nodes"])
    else:
        n = len(SlurmRest(url, SlurmToken("t", "slurm"), timeout=120).nodes())
    said = f"{n} nodes"
except SlurmRestError as exc:
    said = str(exc).split(": ", 2)[-1]
peak = hwm()
print(f"{(peak - base) / 1024:.0f} MiB above imports ({said})")
"""


def node(i: int) -> dict[str, object]:
    name = f"gpu{i:05d}"
    return {
        "architecture": "x86_64", "burstbuffer_network_address": "", "boards": 1, "boot_time": {"set": True,
        "infinite": False, "number": 1764800000}, "cluster_name": "c1", "cores": 48, "specialized_cores": 0,
        "cpu_binding": 0, "cpu_load": 123, "free_mem": {"set": True, "infinite": False, "number": 1800000},
        "cpus": 192, "effective_cpus": 192, "specialized_cpus": "", "energy": {"average_watts": 0,
        "base_consumed_energy": 0, "consumed_energy": 0, "current_watts": {"set": False, "infinite": False,
        "number": 0}, "previous_consumed_energy": 0, "last_collected": 0}, "external_sensors": {},
        "extra": "", "power": {}, "features": ["gpu", "h100", "ib", "nvlink", f"rack{i // 18}"],
        "active_features": ["gpu", "h100", "ib", "nvlink", f"rack{i // 18}"], "gpu_spec": "gpu:h100:8(S:0-1)",
        "gres": "gpu:h100:8(S:0-1)", "gres_drained": "N/A", "gres_used": "gpu:h100:0(IDX:N/A)",
        "instance_id": f"i-{i:017x}", "instance_type": "p5.48xlarge", "last_busy": {"set": True,
        "infinite": False, "number": 1764800000}, "mcs_label": "", "specialized_memory": 0, "name": name,
        "next_state_after_reboot": ["INVALID"], "address": f"10.0.{i // 256}.{i % 256}", "hostname": name,
        "state": ["IDLE"], "state_flags": [], "operating_system": "Linux 6.8.0-1015-aws #16-Ubuntu SMP " * 2,
        "owner": "", "partitions": ["gpu", "all", "debug"], "port": 6818, "real_memory": 2000000,
        "res_cores_per_gpu": 0, "comment": "", "reason": "", "reason_changed_at": {"set": True,
        "infinite": False, "number": 0}, "reason_set_by_user": "", "resume_after": {"set": False,
        "infinite": False, "number": 0}, "reservation": "", "alloc_memory": 0, "alloc_cpus": 0,
        "alloc_idle_cpus": 192, "tres_used": "", "tres_weighted": 0.0, "slurmd_start_time": {"set": True,
        "infinite": False, "number": 1764800000}, "sockets": 2, "threads": 2, "temporary_disk": 0,
        "weight": 1, "topology": f"default:root:spine{i // 512}:leaf{i // 32}",
        "tres": "cpu=192,mem=2000000M,billing=192,gres/gpu=8,gres/gpu:h100=8", "version": "26.05.5",
        "cert_flags": [], "gres_used_detail": ["gpu:h100:0(IDX:N/A)" for _ in range(8)],
    }  # fmt: skip


def serve(body: bytes) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")  # undeclared: the cap is met while reading
            self.end_headers()
            try:
                for at in range(0, len(body), 1 << 20):
                    self.wfile.write(body[at : at + (1 << 20)])
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    args = parser.parse_args()
    listing = json.dumps({"nodes": [node(i) for i in range(args.nodes)], "errors": [], "warnings": []}).encode()
    flood = listing + b" " * max(0, 200 * (1 << 20) - len(listing))
    print(f"listing: {args.nodes} nodes, {len(listing) / (1 << 20):.1f} MiB ({len(listing) // args.nodes} B a node)")
    for label, body, how in (
        ("listing, SlurmRest.nodes()", listing, "topocast"),
        ("200 MiB answer, SlurmRest.nodes()", flood, "topocast"),
        ("listing, json.loads (before)", listing, "json.loads"),
    ):
        server = serve(body)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = subprocess.run([sys.executable, "-c", CHILD, url, how], capture_output=True, text=True, check=False)
        print(f"{label:38} {done.stdout.strip() or done.stderr.strip().splitlines()[-1]}")
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

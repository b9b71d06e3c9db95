"""The fleet joined by address (`connect("HEAD:PORT")`, `fleet --address`): a real multi-node Ray
cluster on this machine (ray.cluster_utils.Cluster: a head and two worker nodes, each its own
raylet), whose two nodes join as docs/fleet.md says a board does, with a board slot and a module
slot, plus a `twin:<profile>` slot so that each drives a twin instead of the machine's (absent)
board. This is the path a lab's boards take; the local `--twins` fleet skips it."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.core.provenance import Source
from engine.results.store import Store
from engine.run.fleet import SweepPlan, connect
from engine.run.fleet.cluster import node_worker_args
from engine.workload.spec import WorkloadSpec

from conftest import fleet_isolation

ray = pytest.importorskip("ray")

NODE = {"board": 1, "module:P3701-0000": 1, "twin:agx-orin-64gb": 1}


def test_a_node_advertising_a_twin_runs_that_twin_and_a_board_node_its_board() -> None:
    assert node_worker_args({"board": 1.0, "twin:agx-orin-64gb": 1.0, "CPU": 4.0}, "0123456789abcdef") == {
        "twin": "agx-orin-64gb", "serial": "twin-01234567"}
    assert node_worker_args({"board": 1.0, "module:P3701-0000": 1.0}, "0123456789abcdef") == {}


@pytest.mark.slow  # a three-node Ray cluster and two workers: ~30-60 s on two cores
def test_two_nodes_joined_by_address_share_a_sweep_and_each_point_names_its_node(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    from engine.workload.resolve import resolve_workload

    plans = [SweepPlan(WorkloadSpec("bert-tiny", t), fast=True, steps=2) for t in ("sst2", "mrpc")]
    with fleet_isolation(tmp_path):
        for plan in plans:
            resolve_workload(plan.workload)  # traced once, into the shared cache
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for _ in range(2):
                cluster.add_node(num_cpus=1, resources=dict(NODE))
            cluster.wait_for_nodes()
            with connect(cluster.address) as fleet:
                boards = fleet.boards()
                assert len(boards) == 2 and len({b.serial for b in boards}) == 2
                assert all(b.is_twin and b.serial.startswith("twin-") and "P3701" in b.module for b in boards)
                # each twin's tree is under its node worker's temp folder, not the user's twin
                assert all(b.name.startswith("board-") for b in boards)
                with Store(tmp_path / "r.sqlite") as store:
                    result = fleet.sweep(plans, store=store)
                    assert result.status == "finished" and sum(result.per_board.values()) == 24
                    serials = set()
                    for o in result.sweeps:
                        points = store.sweep_points(o.sweep_id)
                        assert len({p.key for p in points}) == len(points) == 12
                        assert store.get_sweep(o.sweep_id).source is Source.TWIN
                        serials |= {store.get_device(p.device_id).serial for p in points}
                    assert serials == {b.serial for b in boards}
        finally:
            cluster.shutdown()


def _tls_files(folder: Path, ip: str) -> dict[str, str]:
    """A CA and a node certificate it signs (for 127.0.0.1, localhost and this host's address), as
    Ray's TLS settings want them; openssl's command line, as a lab would make them."""
    import subprocess

    ca_key, ca, key, csr, cert = (folder / n for n in ("ca.key", "ca.pem", "node.key", "node.csr", "node.pem"))
    ext = folder / "san.ext"
    ext.write_text(f"subjectAltName = IP:127.0.0.1, IP:{ip}, DNS:localhost\n")

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=slm-dvfs test CA",
        "-keyout", str(ca_key), "-out", str(ca))
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=slm-dvfs test node", "-keyout", str(key), "-out",
        str(csr))
    ssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "1",
        "-extfile", str(ext), "-out", str(cert))
    return {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": str(cert), "RAY_TLS_SERVER_KEY": str(key),
            "RAY_TLS_CA_CERT": str(ca)}


# Run in a fresh interpreter: Ray reads its TLS settings when it is first imported.
SECURED = """
import json, sys
from ray.cluster_utils import Cluster
from engine.results.store import Store
from engine.run.fleet import SweepPlan, connect
from engine.workload.spec import WorkloadSpec

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
try:
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources=json.loads(sys.argv[1]))
    cluster.wait_for_nodes()
    with connect(cluster.address) as fleet, Store(sys.argv[2]) as store:
        result = fleet.sweep([SweepPlan(WorkloadSpec("bert-tiny", "sst2"), fast=True, steps=2)], store=store)
        print(json.dumps({"status": result.status, "per_board": result.per_board}))
finally:
    cluster.shutdown()
"""


@pytest.mark.slow  # a TLS- and token-secured two-node cluster: ~30-60 s on two cores
def test_a_cluster_secured_as_docs_say_token_and_tls_runs_the_fleet(tmp_path: Path) -> None:
    import json
    import os
    import secrets
    import shutil
    import subprocess
    import sys

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make the test's certificates")
    from ray._private.services import get_node_ip_address

    with fleet_isolation(tmp_path):
        # what docs/fleet.md asks of every node and the driver: Ray's token auth and TLS
        env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
               **_tls_files(tmp_path, get_node_ip_address()),
               "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        out = subprocess.run([sys.executable, "-c", SECURED, json.dumps(NODE), str(tmp_path / "r.sqlite")], env=env,
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == "finished" and sum(result["per_board"].values()) == 12
    assert len(result["per_board"]) == 2 and all(result["per_board"].values())  # both secured nodes measured

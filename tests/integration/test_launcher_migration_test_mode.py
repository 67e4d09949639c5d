"""In test mode the launcher refuses live migration commands cleanly (libvirt's test driver
cannot migrate; the choreography simulates it) and carries on."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import msgspec

from services.launcher.client import LauncherClient
from services.launcher.protocol import AbortMigration, MigrateTo, Shutdown, Start

REPO = Path(__file__).resolve().parents[2]


async def test_migration_commands_are_refused_in_test_mode() -> None:
    vmi = {
        "metadata": {"name": "nomig", "namespace": "ns", "uid": "u-nomig"},
        "spec": {"domain": {"memory": {"guest": "64Mi"}}},
    }
    with tempfile.TemporaryDirectory(prefix="vs-") as tmp:
        vmi_file = Path(tmp) / "vmi.json"
        vmi_file.write_bytes(msgspec.json.encode(vmi))
        sock = str(Path(tmp) / "l.sock")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.launcher", "--vmi", str(vmi_file), "--socket", sock,
            cwd=str(REPO),
        )  # fmt: skip
        try:
            client = await LauncherClient.connect(sock, timeout=10)
            assert client.hello.domain_type == "test" and not client.hello.migration_target
            assert (await client.call(Start())).ok
            refused = await client.call(MigrateTo(target_uri="test:///default"))
            assert not refused.ok and refused.error and "test" in refused.error
            no_job = await client.call(AbortMigration())
            assert not no_job.ok and no_job.error == "no migration is running"
            assert (await client.call(Shutdown(grace_period_seconds=0))).ok
            await client.wait_for(lambda s: s.final)
            await client.close()
            assert await asyncio.wait_for(proc.wait(), 10) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

#!/usr/bin/env python3
"""Create a VM, start it and wait until its VMI is Running, over NATS alone (nats-py).

    VIRTSTREAM_TOKEN=... python examples/scripts/start_vm.py --nats-url nats://127.0.0.1:4222 \
        --name demo

The intents carry `Authorization: Bearer <token>` (`--token`, else $VIRTSTREAM_TOKEN: an api
token such as <data-dir>/credentials/admin-token); the api refuses an intent without one
unless its auth file names who such intents are (`natsIntents`).

Intents go to the api's request-reply endpoints (`virt-api.v1.<ns>.<plural>.<name>.<verb>`);
the outcome is read from the event stream with an ordered consumer on the VMI's subjects
(`virt.vmi.<ns>.<name>.>`), from the sequence the start's reply names, so no event is
missed and none from before is mistaken for this start's. Exit 0 when Running, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid

import nats
from nats.js.api import ConsumerConfig, DeliverPolicy

RUNNING, FAILED = "DomainStarted", ("VMIFailed",)


def vm(name: str) -> dict[str, object]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                    "terminationGracePeriodSeconds": 0,
                }
            },
        },
    }


async def request(
    nc: nats.NATS, subject: str, body: object, key: str, token: str
) -> tuple[int, int]:
    """One intent; retried with the same Idempotency-Key on a timeout (applied once)."""
    headers = {"Idempotency-Key": key, "X-Correlation-Id": key}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    for attempt in range(5):
        try:
            msg = await nc.request(subject, json.dumps(body).encode(), 10, headers=headers)
            break
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            if attempt == 4:
                raise
            await asyncio.sleep(1)
    h = msg.headers or {}
    if "Nats-Service-Error" in h:
        sys.exit(f"{subject}: {h['Nats-Service-Error-Code']} {h['Nats-Service-Error']}")
    return int(h["Virt-Status-Code"]), int(h["Virt-Stream-Seq"])


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nats-url", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    p.add_argument("--namespace", default="default")
    p.add_argument("--name", default="script-vm")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--token", default=os.environ.get("VIRTSTREAM_TOKEN", ""))
    args = p.parse_args()
    ns, name = args.namespace, args.name
    nc = await nats.connect(args.nats_url)
    try:
        api = f"virt-api.v1.{ns}.virtualmachines.{name}"
        run = uuid.uuid4().hex
        code, _ = await request(nc, f"{api}.create", vm(name), f"{run}-create", args.token)
        print(f"created {ns}/{name} ({code})")
        code, seq = await request(nc, f"{api}.start", {}, f"{run}-start", args.token)
        print(f"start requested ({code}), event #{seq}")

        js = nc.jetstream()
        sub = await js.subscribe(
            f"virt.vmi.{ns}.{name}.>",
            ordered_consumer=True,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=seq
            ),
        )
        deadline = time.monotonic() + args.timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except nats.errors.TimeoutError:
                break
            event = json.loads(msg.data)
            print(f"  {event['type']}")
            if event["type"] == RUNNING:
                print(f"{ns}/{name} is Running")
                return 0
            if event["type"] in FAILED:
                print(f"{ns}/{name} failed: {event.get('reason', '')}")
                return 1
        print(f"{ns}/{name} not Running after {args.timeout:g}s")
        return 1
    finally:
        await nc.drain()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

#!/usr/bin/env node
// Create a VM, start it and wait until its VMI is Running, over NATS alone (the `nats`
// npm package):
//
//     npm install nats && NATS_URL=nats://127.0.0.1:4222 VIRTSTREAM_TOKEN=... \
//         node start_vm.mjs --name demo
//
// The intents carry `Authorization: Bearer $VIRTSTREAM_TOKEN` (an api token, e.g.
// <data-dir>/credentials/admin-token): the api refuses an intent without one unless its
// auth file names who such intents are (natsIntents).
// Intents go to the api's request-reply endpoints (virt-api.v1.<ns>.<plural>.<name>.<verb>);
// the outcome is read from the event stream with an ordered consumer on the VMI's subjects
// (virt.vmi.<ns>.<name>.>), from the sequence the start's reply names. Exit 0 when Running.
import { connect, consumerOpts, headers } from "nats";
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    "nats-url": { type: "string", default: process.env.NATS_URL ?? "nats://127.0.0.1:4222" },
    namespace: { type: "string", default: "default" },
    name: { type: "string", default: "script-vm" },
    timeout: { type: "string", default: "60" },
    token: { type: "string", default: process.env.VIRTSTREAM_TOKEN ?? "" },
  },
});
const ns = args.namespace;
const name = args.name;
const enc = new TextEncoder();
const dec = new TextDecoder();

const vm = {
  apiVersion: "kubevirt.io/v1",
  kind: "VirtualMachine",
  metadata: { name },
  spec: {
    runStrategy: "Halted",
    template: {
      spec: {
        domain: { memory: { guest: "64Mi" }, devices: {} },
        terminationGracePeriodSeconds: 0,
      },
    },
  },
};

// One intent; retried with the same Idempotency-Key on a timeout (applied once).
async function request(nc, subject, body, key) {
  const h = headers();
  h.set("Idempotency-Key", key);
  h.set("X-Correlation-Id", key);
  if (args.token) h.set("Authorization", `Bearer ${args.token}`);
  let msg;
  for (let attempt = 0; ; attempt++) {
    try {
      msg = await nc.request(subject, enc.encode(JSON.stringify(body)), { timeout: 10000, headers: h });
      break;
    } catch (err) {
      if (attempt === 4) throw err;
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  if (msg.headers?.has("Nats-Service-Error")) {
    const code = msg.headers.get("Nats-Service-Error-Code");
    console.error(`${subject}: ${code} ${msg.headers.get("Nats-Service-Error")}`);
    process.exit(1);
  }
  return [Number(msg.headers.get("Virt-Status-Code")), Number(msg.headers.get("Virt-Stream-Seq"))];
}

// credentials in the URL (nats://user:password@host:port), as nats-py reads them
const urls = args["nats-url"].split(",").map((s) => new URL(s));
const auth = urls[0].username
  ? { user: decodeURIComponent(urls[0].username), pass: decodeURIComponent(urls[0].password) }
  : {};
const nc = await connect({ servers: urls.map((u) => `${u.protocol}//${u.host}`), ...auth });
let status = 1;
try {
  const api = `virt-api.v1.${ns}.virtualmachines.${name}`;
  const run = randomUUID();
  let [code] = await request(nc, `${api}.create`, vm, `${run}-create`);
  console.log(`created ${ns}/${name} (${code})`);
  let seq;
  [code, seq] = await request(nc, `${api}.start`, {}, `${run}-start`);
  console.log(`start requested (${code}), event #${seq}`);

  const opts = consumerOpts();
  opts.orderedConsumer();
  opts.startSequence(seq);
  const sub = await nc.jetstream().subscribe(`virt.vmi.${ns}.${name}.>`, opts);
  const timer = setTimeout(() => sub.unsubscribe(), Number(args.timeout) * 1000);
  for await (const msg of sub) {
    const event = JSON.parse(dec.decode(msg.data));
    console.log(`  ${event.type}`);
    if (event.type === "DomainStarted") {
      console.log(`${ns}/${name} is Running`);
      status = 0;
      break;
    }
    if (event.type === "VMIFailed") {
      console.log(`${ns}/${name} failed: ${event.reason ?? ""}`);
      break;
    }
  }
  clearTimeout(timer);
  if (status !== 0) console.log(`${ns}/${name} is not Running`);
} finally {
  await nc.drain();
}
process.exit(status);

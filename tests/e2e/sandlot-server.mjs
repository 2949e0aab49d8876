// `sandlot serve` for the Node end-to-end tests (the TypeScript SDK test and the browser test): the binary
// ($SANDLOT_BIN, or the newest target/debug/sandlot or target/*/debug/sandlot) on a free port with a temporary SANDBOX_ROOT, ready once /healthz answers;
// `stopSandlot` ends it and removes that root.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const repo = resolve(import.meta.dirname, "../..");

function binary() {
  if (process.env.SANDLOT_BIN) return process.env.SANDLOT_BIN;
  // The most recently built one: the host build (target/debug) or one for another target (target/<triple>/debug).
  const target = join(repo, "target");
  const candidates = ["", ...readdirSync(target)]
    .map((dir) => join(target, dir, "debug", "sandlot"))
    .filter((candidate) => existsSync(candidate))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  if (candidates.length === 0) throw new Error("no sandlot binary: run cargo build first or set SANDLOT_BIN");
  return candidates[0];
}

function freePort() {
  return new Promise((done) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

/** Starts `sandlot serve` with `token` and `env`; returns {process, base, root} once it answers /healthz. */
export async function startSandlot({ token, rootPrefix, env = {} }) {
  const port = await freePort();
  const root = mkdtempSync(join(tmpdir(), rootPrefix));
  const base = `http://127.0.0.1:${port}`;
  const child = spawn(binary(), ["serve"], {
    env: { ...process.env, MCP_API_TOKEN: token, SANDBOX_ROOT: root, MCP_HTTP_ADDR: `127.0.0.1:${port}`, SANDLOT_LOG: "warn", ...env },
    stdio: ["ignore", "ignore", "inherit"],
  });
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${base}/healthz`)).ok) return { process: child, base, root };
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill("SIGTERM");
  throw new Error("sandlot serve did not start");
}

/** Stops a server from `startSandlot` (SIGTERM, then waits for its exit) and removes its SANDBOX_ROOT. */
export async function stopSandlot(server) {
  if (!server) return;
  const { process: child, root } = server;
  child.kill("SIGTERM");
  if (child.exitCode === null && child.signalCode === null) await new Promise((done) => child.once("exit", done));
  rmSync(root, { recursive: true, force: true });
}

// Live sandboxes with the official TypeScript MCP SDK over Streamable HTTP (docs/mcp.md, "Live sandboxes"): two
// `session: true` calls of one conversation share the interpreter (a TypeScript function and a variable defined by the
// first are the second's), the result names the live sandbox, and sandbox_session reports then closes it. Needs
// root (sandboxes) and a built binary ($SANDLOT_BIN or target/debug/sandlot).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { startSandlot, stopSandlot } from "../sandlot-server.mjs";

const token = "ts-sessions-" + Math.random().toString(16).slice(2);
let server;

before(async () => {
  assert.equal(process.getuid(), 0, "the end-to-end tests start sandboxes and need root");
  server = await startSandlot({ token, rootPrefix: "sandlot-ts-sessions-" });
});

after(() => stopSandlot(server));

test("a session keeps TypeScript's state between calls", async () => {
  const client = new Client({ name: "sandlot-ts-sessions", version: "1.0.0" });
  const headers = { Authorization: `Bearer ${token}` };
  await client.connect(new StreamableHTTPClientTransport(new URL(`${server.base}/mcp`), { requestInit: { headers } }));
  const run = (code) =>
    client.callTool({
      name: "sandbox_run_code",
      arguments: { conversationId: "ts-session", language: "typescript", code, session: true },
    });

  const first = await run("var total: number = 40;\nfunction add(n: number): number { total += n; return total; }");
  assert.equal(first.isError, false, first.content[0].text);
  const second = await run("console.log(add(2));");
  assert.equal(second.isError, false, second.content[0].text);
  assert.equal(second.structuredContent.stdout, "42\n");
  assert.equal(second.structuredContent.session.id, first.structuredContent.session.id);
  assert.deepEqual(
    [first.structuredContent.session.calls, second.structuredContent.session.calls, second.structuredContent.session.stateLost],
    [1, 2, false],
  );

  const status = await client.callTool({ name: "sandbox_session", arguments: { conversationId: "ts-session", action: "status" } });
  assert.equal(status.structuredContent.live, true);
  assert.equal(status.structuredContent.id, first.structuredContent.session.id);
  assert.deepEqual(status.structuredContent.interpreters.map((i) => i.language), ["javascript"]);

  const closed = await client.callTool({ name: "sandbox_session", arguments: { conversationId: "ts-session", action: "close" } });
  assert.deepEqual([closed.structuredContent.live, closed.structuredContent.closed], [false, true]);
  const fresh = await run("console.log(typeof add);");
  assert.equal(fresh.structuredContent.stdout, "undefined\n");
  assert.equal(fresh.structuredContent.session.stateLost, true);
  await client.close();
});

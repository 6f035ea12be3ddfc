// Drives dentate's MCP server with the official MCP TypeScript SDK client,
// over stdio (`dentate mcp`) and over streamable HTTP (`dentate serve`,
// /mcp), keyless and then with per-tenant API keys.
//
//   node client.mjs /path/to/dentate
//
// Exits non-zero on the first failed assertion, after printing the
// server's stderr for diagnosis.

import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const EXPECTED_TOOLS = [
  'add_messages',
  'add_memory',
  'search_memories',
  'get_memory',
  'update_memory',
  'delete_memory',
  'list_users',
];

const ALICE_TEXT = 'Alice is allergic to peanuts';
const BOB_TEXT = 'Bob plays the cello every Sunday morning';
const TENANT_A_TEXT = 'Tenant A secret: the launch code is walrus-42';

const dentate = resolve(process.argv[2] ?? 'target/debug/dentate');
const temps = [];
const children = [];
const logs = {};
let checks = 0;

function ok(cond, msg) {
  assert.ok(cond, msg);
  checks++;
}
function eq(a, b, msg) {
  assert.deepStrictEqual(a, b, msg);
  checks++;
}

function tempDir(tag) {
  const d = mkdtempSync(join(tmpdir(), `dentate-mcp-${tag}-`));
  temps.push(d);
  return d;
}

function newClient() {
  return new Client({ name: 'dentate-mcp-test', version: '1.0.0' });
}

function textOf(result) {
  ok(Array.isArray(result.content) && result.content.length > 0, 'a tool result has content');
  const block = result.content.find((c) => c.type === 'text');
  ok(block, `a tool result has a text block: ${JSON.stringify(result)}`);
  return block.text;
}

async function call(client, name, args = {}) {
  return client.callTool({ name, arguments: args });
}

/** Calls a tool that must succeed and returns its JSON payload. */
async function callOk(client, name, args = {}) {
  const r = await call(client, name, args);
  ok(!r.isError, `${name}(${JSON.stringify(args)}) failed: ${JSON.stringify(r.content)}`);
  return JSON.parse(textOf(r));
}

/** The common scenario, run over any connected client. */
async function scenario(client, label) {
  // Tools: the seven, each with a description and an object input schema.
  const { tools } = await client.listTools();
  eq([...tools.map((t) => t.name)].sort(), [...EXPECTED_TOOLS].sort(), `${label}: tool names`);
  for (const t of tools) {
    ok(typeof t.description === 'string' && t.description.length > 10, `${label}: ${t.name} has a description`);
    ok(t.inputSchema && t.inputSchema.type === 'object', `${label}: ${t.name} has an object input schema`);
  }
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  for (const [tool, field] of [
    ['add_memory', 'user_id'],
    ['add_memory', 'text'],
    ['search_memories', 'query'],
    ['get_memory', 'memory_id'],
    ['update_memory', 'text'],
    ['add_messages', 'messages'],
  ]) {
    ok(byName[tool].inputSchema.properties?.[field], `${label}: ${tool} schema names ${field}`);
    ok((byName[tool].inputSchema.required ?? []).includes(field), `${label}: ${tool} requires ${field}`);
  }

  // add_memory for alice and bob.
  const aliceMade = await callOk(client, 'add_memory', { user_id: 'alice', text: ALICE_TEXT });
  ok(Array.isArray(aliceMade) && aliceMade.length > 0, `${label}: add_memory made a memory for alice: ${JSON.stringify(aliceMade)}`);
  ok(aliceMade.some((m) => m.text.includes('peanuts')), `${label}: alice's memory has the text`);
  const bobMade = await callOk(client, 'add_memory', { user_id: 'bob', text: BOB_TEXT });
  ok(bobMade.length > 0, `${label}: add_memory made a memory for bob`);
  const bobIds = new Set(bobMade.map((m) => m.id));

  // add_messages (background ingest) for alice too.
  const appended = await callOk(client, 'add_messages', {
    user_id: 'alice',
    messages: [
      { content: 'I moved to Lisbon last spring', role: 'user', timestamp: '2024-03-01T14:00:00Z' },
      { content: 'Lisbon is lovely in April.', role: 'assistant' },
    ],
  });
  ok(Array.isArray(appended.message_ids) && appended.message_ids.length === 2, `${label}: add_messages stored 2 messages: ${JSON.stringify(appended)}`);

  // search_memories finds the peanut memory, never bob's.
  const found = await callOk(client, 'search_memories', { user_id: 'alice', query: 'what food is Alice allergic to? peanuts', k: 10 });
  ok(Array.isArray(found.results), `${label}: search has results`);
  const peanut = found.results.find((m) => m.text.includes('peanuts'));
  ok(peanut, `${label}: search for alice finds the peanut memory: ${JSON.stringify(found)}`);
  ok(typeof peanut.score === 'number', `${label}: a search result has a score`);
  ok(Array.isArray(peanut.source_ids) && peanut.source_ids.length > 0, `${label}: a search result names its sources`);
  for (const m of found.results) {
    ok(!m.text.includes('cello') && !bobIds.has(m.id), `${label}: alice's search returned bob's memory ${JSON.stringify(m)}`);
  }
  const bobSearch = await callOk(client, 'search_memories', { user_id: 'bob', query: 'peanuts allergy cello', k: 10 });
  for (const m of bobSearch.results) {
    ok(!m.text.includes('peanuts'), `${label}: bob's search returned alice's memory ${JSON.stringify(m)}`);
  }

  // get_memory shows the source messages.
  const got = await callOk(client, 'get_memory', { memory_id: peanut.id });
  eq(got.id, peanut.id, `${label}: get_memory id`);
  ok(Array.isArray(got.sources) && got.sources.length > 0, `${label}: get_memory shows sources: ${JSON.stringify(got)}`);
  ok(got.sources.some((s) => s.content.includes('peanuts')), `${label}: a source is the original message`);

  // update_memory changes the text and keeps the id.
  const updated = await callOk(client, 'update_memory', { memory_id: peanut.id, text: 'Alice is allergic to peanuts and cashews' });
  eq(updated.id, peanut.id, `${label}: update keeps the id`);
  ok(updated.text.includes('cashews'), `${label}: update_memory changed the text: ${JSON.stringify(updated)}`);
  const regot = await callOk(client, 'get_memory', { memory_id: peanut.id });
  ok(regot.text.includes('cashews'), `${label}: get_memory after update shows the new text`);
  const afterUpdate = await callOk(client, 'search_memories', { user_id: 'alice', query: 'cashews allergy', k: 10 });
  ok(afterUpdate.results.some((m) => m.id === peanut.id && m.text.includes('cashews')), `${label}: search sees the updated text`);

  // delete_memory removes it from search.
  const del = await callOk(client, 'delete_memory', { memory_id: peanut.id });
  eq(del.forgotten, peanut.id, `${label}: delete_memory answer`);
  const afterDelete = await callOk(client, 'search_memories', { user_id: 'alice', query: 'what food is Alice allergic to? peanuts cashews', k: 100 });
  ok(!afterDelete.results.some((m) => m.id === peanut.id), `${label}: the deleted memory left search: ${JSON.stringify(afterDelete)}`);
  const delAgain = await call(client, 'delete_memory', { memory_id: peanut.id });
  ok(delAgain.isError === true, `${label}: deleting twice is an error result: ${JSON.stringify(delAgain)}`);

  // Errors: a missing id is a tool error (isError), not a protocol failure.
  const missing = await call(client, 'get_memory', { memory_id: 987654321 });
  ok(missing.isError === true, `${label}: get_memory of a missing id has isError: ${JSON.stringify(missing)}`);
  ok(/not_found/.test(textOf(missing)), `${label}: the error names not_found: ${textOf(missing)}`);
  const badK = await call(client, 'search_memories', { user_id: 'alice', query: 'x', k: 0 });
  ok(badK.isError === true, `${label}: k = 0 is an error result`);
  // Arguments of the wrong type: a JSON-RPC error or an error result;
  // either way the session survives.
  let wrongType;
  try {
    wrongType = await call(client, 'get_memory', { memory_id: 'not-a-number' });
  } catch (e) {
    wrongType = { isError: true, thrown: String(e) };
  }
  ok(wrongType.isError === true, `${label}: a string memory_id is refused`);
  let unknown;
  try {
    unknown = await call(client, 'no_such_tool', {});
  } catch (e) {
    unknown = { isError: true, thrown: String(e) };
  }
  ok(unknown.isError === true, `${label}: an unknown tool is refused`);

  // list_users names both users.
  const users = await callOk(client, 'list_users');
  const names = users.users.map((u) => u.user_id);
  ok(names.includes('alice') && names.includes('bob'), `${label}: list_users names alice and bob: ${JSON.stringify(users)}`);
}

async function overStdio() {
  const dir = tempDir('stdio');
  const transport = new StdioClientTransport({
    command: dentate,
    args: ['mcp', '--dir', dir],
    stderr: 'pipe',
  });
  logs.stdio = [];
  transport.stderr?.on('data', (d) => logs.stdio.push(String(d)));
  const client = newClient();
  await client.connect(transport);
  try {
    const info = client.getServerVersion();
    eq(info?.name, 'dentate', 'stdio: server name');
    ok(client.getServerCapabilities()?.tools, 'stdio: server offers tools');
    ok((client.getInstructions() ?? '').includes('search_memories'), 'stdio: server instructions');
    await scenario(client, 'stdio');
  } finally {
    await client.close();
  }
}

/** Starts `dentate serve` on an ephemeral port; resolves to {proc, addr}. */
function startServer(dir) {
  return new Promise((resolveStart, reject) => {
    const proc = spawn(dentate, ['serve', '--dir', dir, '--bind', '127.0.0.1:0'], {
      stdio: ['ignore', 'ignore', 'pipe'],
      });
    children.push(proc);
    logs.serve = [];
    const timer = setTimeout(() => reject(new Error('dentate serve printed no address in 60 s')), 60_000);
    const lines = createInterface({ input: proc.stderr });
    lines.on('line', (line) => {
      logs.serve.push(line + '\n');
      const m = /^dentate serve: http:\/\/(\S+)/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolveStart({ proc, addr: m[1] });
      }
    });
    proc.on('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`dentate serve exited early (code ${code}, signal ${sig})`));
    });
    proc.on('error', reject);
  });
}

function stopServer(proc) {
  return new Promise((res) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return res();
    const kill = setTimeout(() => proc.kill('SIGKILL'), 15_000);
    proc.once('exit', () => {
      clearTimeout(kill);
      res();
    });
    proc.kill('SIGTERM');
  });
}

async function httpClient(url, key) {
  const headers = key === undefined ? {} : { Authorization: `Bearer ${key}` };
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = newClient();
  await client.connect(transport);
  return client;
}

/** Asserts that connecting with `key` fails with HTTP 401. */
async function refused(url, key, label) {
  let err;
  try {
    const c = await httpClient(url, key);
    await c.close();
  } catch (e) {
    err = e;
  }
  ok(err, `${label}: connecting succeeded but must fail`);
  eq(err.code, 401, `${label}: the failure is a 401: ${err}`);
}

function createKey(dir, tenant, role) {
  const out = execFileSync(dentate, ['keys', 'create', '--dir', dir, '--tenant', tenant, '--role', role], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const key = out.trim().split('\n').pop().trim();
  ok(key.length >= 16 && !/\s/.test(key), `keys create printed a key: ${JSON.stringify(out)}`);
  return key;
}

async function overHttp() {
  const dir = tempDir('http');
  const { proc, addr } = await startServer(dir);
  const url = `http://${addr}/mcp`;
  try {
    // Keyless: loopback clients need no key.
    const client = await httpClient(url);
    try {
      eq(client.getServerVersion()?.name, 'dentate', 'http: server name');
      await scenario(client, 'http');
    } finally {
      await client.close();
    }

    // Keys, made through the CLI while the server runs.
    const keyA = createKey(dir, 'tenant-a', 'write');
    const keyB = createKey(dir, 'tenant-b', 'write');
    const keyARead = createKey(dir, 'tenant-a', 'read');

    await refused(url, undefined, 'http, keys exist, no key');
    await refused(url, 'dk_bogus_0123456789abcdef0123456789abcdef', 'http, bogus key');

    const a = await httpClient(url, keyA);
    const b = await httpClient(url, keyB);
    const ar = await httpClient(url, keyARead);
    try {
      const made = await callOk(a, 'add_memory', { user_id: 'carol', text: TENANT_A_TEXT });
      ok(made.length > 0, 'tenant A: add_memory made a memory');
      const memId = made[0].id;
      const seenByA = await callOk(a, 'search_memories', { user_id: 'carol', query: 'launch code walrus', k: 10 });
      ok(seenByA.results.some((m) => m.id === memId), 'tenant A: finds its own memory');

      // Tenant B: same user id, same memory id; never A's text.
      const never = (r, what) => {
        ok(!JSON.stringify(r).includes('walrus'), `tenant B: ${what} leaked tenant A's text: ${JSON.stringify(r)}`);
      };
      const bSearch = await call(b, 'search_memories', { user_id: 'carol', query: 'launch code walrus', k: 10 });
      never(bSearch, 'search_memories');
      ok(bSearch.isError === true || JSON.parse(textOf(bSearch)).results.length === 0, 'tenant B: search is an error or empty');
      const bGet = await call(b, 'get_memory', { memory_id: memId });
      never(bGet, 'get_memory');
      ok(bGet.isError === true, `tenant B: get_memory of A's memory is an error: ${JSON.stringify(bGet)}`);
      const bUpdate = await call(b, 'update_memory', { memory_id: memId, text: 'overwritten by B' });
      never(bUpdate, 'update_memory');
      ok(bUpdate.isError === true, 'tenant B: update_memory of A\'s memory is an error');
      const bDelete = await call(b, 'delete_memory', { memory_id: memId });
      ok(bDelete.isError === true, 'tenant B: delete_memory of A\'s memory is an error');
      const bUsers = await callOk(b, 'list_users');
      never(bUsers, 'list_users');
      ok(!bUsers.users.some((u) => u.user_id === 'carol'), 'tenant B: list_users does not name A\'s user');

      // A's memory survived B's attempts, unchanged.
      const still = await callOk(a, 'get_memory', { memory_id: memId });
      ok(still.text.includes('walrus') && still.forgotten !== true, `tenant A: its memory is intact: ${JSON.stringify(still)}`);
      // The keyless scenario ran as tenant `default`: A does not see its users.
      const aUsers = await callOk(a, 'list_users');
      eq(aUsers.users.map((u) => u.user_id), ['carol'], 'tenant A: list_users names only its own user');

      // A read key of tenant A can search but not write.
      const arSearch = await callOk(ar, 'search_memories', { user_id: 'carol', query: 'launch code', k: 5 });
      ok(arSearch.results.some((m) => m.id === memId), 'tenant A read key: search works');
      const arAdd = await call(ar, 'add_memory', { user_id: 'carol', text: 'read keys cannot write' });
      ok(arAdd.isError === true && /forbidden/.test(textOf(arAdd)), `tenant A read key: add_memory is forbidden: ${JSON.stringify(arAdd)}`);
      const arDelete = await call(ar, 'delete_memory', { memory_id: memId });
      ok(arDelete.isError === true, 'tenant A read key: delete_memory is refused');
    } finally {
      await Promise.allSettled([a.close(), b.close(), ar.close()]);
    }
  } finally {
    await stopServer(proc);
  }
}

const started = Date.now();
let failed = false;
const done = [];
try {
  for (const [name, run] of [
    ['stdio', overStdio],
    ['http', overHttp],
  ]) {
    const t = Date.now();
    await run();
    done.push(`${name} ok (${((Date.now() - t) / 1000).toFixed(1)} s)`);
  }
} catch (e) {
  failed = true;
  console.error(`FAILED: ${e?.stack ?? e}`);
  for (const [name, lines] of Object.entries(logs)) {
    if (lines.length) console.error(`--- stderr of dentate ${name} (last 40 lines) ---\n${lines.join('').split('\n').slice(-40).join('\n')}`);
  }
} finally {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  }
  for (const d of temps) rmSync(d, { recursive: true, force: true });
}
const secs = ((Date.now() - started) / 1000).toFixed(1);
console.log(`dentate MCP client test (@modelcontextprotocol/sdk): ${done.join(', ') || 'nothing passed'}; ${checks} checks in ${secs} s`);
console.log(failed ? `${checks} passed, 1 failed` : `${checks} passed, 0 failed`);
process.exit(failed ? 1 : 0);

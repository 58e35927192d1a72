#!/usr/bin/env node
// The cost of moat-sandbox's layers over moat's own /v1 API, side by side in
// one run against one daemon, iterations interleaved so that both see the
// same machine. Each provider call's HTTP request is captured once and the
// identical request is then replayed with plain fetch, so the two columns
// differ only by the client code:
//
//   (a) MoatSandboxClient session.execCommand({cmd:'true'}) (the Agents SDK
//       provider: argv, yield, the SDK's exec text) vs that same POST exec
//   (b) MoatSandbox.exec('true') (the plain client) vs that same POST exec
//   (c) the editor's apply_patch of a one-line update vs that same POST patch
//   (d) (a) and (b) again with fetch answered in-process by the recorded
//       answer: the client code's own cost, without the daemon's noise
//   (e) the MCP door: tools/call exec {cmd:'true'} POSTed to /mcp (one
//       session, plain fetch) vs /v1 exec {cmd:'true'}: the door's cost
//
// Prints medians and p90s in milliseconds, the per-call overhead (median
// difference) and the ratio. The issue's bound: at most 0.3 ms per exec.
// BENCH_N iterations (default 300).
//
//   node bench/agents_bench.mjs          # starts build/moat serve itself (MOAT_BIN)
//   MOAT_URL=http://127.0.0.1:7070 MOAT_API_TOKEN=... node bench/agents_bench.mjs
//
// The packages come from clients/js/node_modules (cd clients/js && npm ci).
import fs from 'node:fs'
import { fileURLToPath } from 'node:url'

const root = new URL('..', import.meta.url)
if (!fs.existsSync(fileURLToPath(new URL('clients/js/node_modules/@openai/agents', root)))) {
  console.error('agents_bench: the Agents SDK is not installed: (cd clients/js && npm ci)')
  process.exit(2)
}
const { MoatSandbox, MoatSandboxClient } = await import(new URL('clients/js/index.js', root).href)

const N = Number(process.env.BENCH_N || 300)

let daemon = null
let url = process.env.MOAT_URL
let token = process.env.MOAT_API_TOKEN
if (!url) {
  process.env.MOAT_BIN ||= fileURLToPath(new URL('build/moat', root))
  const { Daemon } = await import(new URL('tests/node/daemon.mjs', root).href)
  daemon = new Daemon()
  await daemon.start()
  url = daemon.url
  token = daemon.token
}

// The request a client call makes, recorded by wrapping fetch once.
async function capture(fn) {
  const real = globalThis.fetch
  const seen = []
  globalThis.fetch = (u, init) => {
    seen.push({ url: String(u), init: { ...init } })
    return real(u, init)
  }
  try {
    await fn()
  } finally {
    globalThis.fetch = real
  }
  if (seen.length !== 1) throw new Error(`expected one request, saw ${seen.length}: ${seen.map((s) => s.url).join(', ')}`)
  return seen[0]
}

async function replay({ url: u, init }) {
  const r = await fetch(u, init)
  const b = await r.arrayBuffer()
  if (r.status >= 400) throw new Error(`replay: ${r.status} ${Buffer.from(b).toString().slice(0, 200)}`)
  return b
}

const ms = () => Number(process.hrtime.bigint()) / 1e6
const q = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))]
}

async function pair(name, viaClient, raw) {
  for (let i = 0; i < 20; i++) { await viaClient(); await raw() } // warm-up
  const a = [], b = []
  for (let i = 0; i < N; i++) {
    // alternate which goes first, so neither always follows the other
    const order = i % 2 ? [[a, viaClient], [b, raw]] : [[b, raw], [a, viaClient]]
    for (const [xs, f] of order) {
      const t = ms()
      await f()
      xs.push(ms() - t)
    }
  }
  const ma = q(a, 0.5), mb = q(b, 0.5)
  console.log(`${name.padEnd(46)} client ${ma.toFixed(3)} (p90 ${q(a, 0.9).toFixed(3)})  /v1 ${mb.toFixed(3)} (p90 ${q(b, 0.9).toFixed(3)})  overhead ${(ma - mb).toFixed(3)} ms  ratio ${(ma / mb).toFixed(3)}x`)
}

const client = new MoatSandboxClient({ baseUrl: url, token })
let session, plain
try {
  session = await client.create()
  plain = await MoatSandbox.connect(session.state.sandboxId, { baseUrl: url, token })
  console.log(`moat-sandbox vs /v1, N=${N}, node ${process.version}, daemon ${url}${daemon ? ` (${process.env.MOAT_BIN})` : ''}`)

  const execArgs = { cmd: 'true' }
  const execReq = await capture(() => session.execCommand(execArgs))
  await pair('(a) session.execCommand("true") [Agents SDK]', () => session.execCommand(execArgs), () => replay(execReq))

  const plainReq = await capture(() => plain.exec('true'))
  await pair('(b) MoatSandbox.exec("true") [plain client]', () => plain.exec('true'), () => replay(plainReq))

  // (c) a patch that flips a line back and forth: each call undoes the last
  await plain.writeFile('flip.txt', 'a\n')
  const editor = session.createEditor()
  const toB = { type: 'update_file', path: 'flip.txt', diff: '@@\n-a\n+b\n' }
  const toA = { type: 'update_file', path: 'flip.txt', diff: '@@\n-b\n+a\n' }
  const patchReq = await capture(() => editor.updateFile(toB)) // now b
  const rawToA = { url: patchReq.url, init: { ...patchReq.init, body: patchReq.init.body.replace('-a\\n+b', '-b\\n+a') } }
  if (rawToA.init.body === patchReq.init.body) throw new Error('agents_bench: could not derive the reverse patch')
  // both sides flip b -> a -> b: two patches a call
  await pair('(c) 2x editor.updateFile (one-line patch)',
    async () => { await editor.updateFile(toA); await editor.updateFile(toB) },
    async () => { await replay(rawToA); await replay(patchReq) })

  // (d) the same calls with the network taken out: fetch answers at once
  // with the recorded answer, for the client and for the bare replay alike
  const canned = async (req) => {
    const r = await fetch(req.url, req.init)
    return { status: r.status, headers: [...r.headers], body: Buffer.from(await r.arrayBuffer()) }
  }
  const execAns = await canned(execReq)
  const plainAns = await canned(plainReq)
  const real = globalThis.fetch
  let ans = null
  globalThis.fetch = async () => new Response(ans.body, { status: ans.status, headers: ans.headers })
  try {
    await pair('(d) execCommand, fetch answered in-process', () => { ans = execAns; return session.execCommand(execArgs) },
      () => { ans = execAns; return replay(execReq) })
    await pair('(d) MoatSandbox.exec, fetch answered in-process', () => { ans = plainAns; return plain.exec('true') },
      () => { ans = plainAns; return replay(plainReq) })
  } finally {
    globalThis.fetch = real
  }

  // (e) the MCP door against /v1 for the same command
  const hdr = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
    ...(token ? { Authorization: `Bearer ${token}` } : {}) }
  const init = await fetch(`${url}/mcp`, { method: 'POST', headers: hdr, body: JSON.stringify({
    jsonrpc: '2.0', id: 0, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } }) })
  await init.arrayBuffer()
  const sid = init.headers.get('mcp-session-id')
  if (!sid) throw new Error(`agents_bench: /mcp initialize answered ${init.status} without a session`)
  const mh = { ...hdr, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-06-18' }
  await (await fetch(`${url}/mcp`, { method: 'POST', headers: mh,
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) })).arrayBuffer()
  let n = 1
  const mcpExec = async () => {
    const r = await fetch(`${url}/mcp`, { method: 'POST', headers: mh, body: JSON.stringify({
      jsonrpc: '2.0', id: n++, method: 'tools/call',
      params: { name: 'exec', arguments: { id: plain.id, cmd: 'true' } } }) })
    const j = await r.json()
    if (j.error || j.result?.isError) throw new Error(`agents_bench: MCP exec failed: ${JSON.stringify(j).slice(0, 300)}`)
  }
  const v1Req = { url: `${url}/v1/sandboxes/${plain.id}/exec`, init: { method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ cmd: 'true' }) } }
  await pair('(e) MCP tools/call exec "true" [/mcp door]', mcpExec, () => replay(v1Req))
  await fetch(`${url}/mcp`, { method: 'DELETE', headers: mh }).then((r) => r.arrayBuffer()).catch(() => {})
} finally {
  if (session) await client.delete(session.state).catch(() => {})
  if (daemon) await daemon.stop()
}

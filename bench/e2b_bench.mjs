#!/usr/bin/env node
// The E2B door's cost, measured through the unchanged e2b SDK side by side
// with moat's own /v1 API (plain fetch, Authorization: Bearer) in one run
// against one daemon, iterations interleaved so that both see the same machine:
//
//   (a) Sandbox.create() until the first commands.run('true') has answered,
//       vs POST /v1/sandboxes + POST /v1/sandboxes/{id}/exec
//   (b) commands.run('true') in a running sandbox vs /v1 exec
//   (c) files.write then files.read of 1 MiB vs PUT then GET /v1 files
//   (d) 100 sandboxes created concurrently (per-create latency and the wall
//       time of the whole batch)
//
// Prints the median and p90 in milliseconds and the ratio E2B / v1 per
// operation. BENCH_N iterations (default 30), BENCH_CONCURRENT (100),
// BENCH_ROUNDS (batches of (d), default 3).
//
//   node bench/e2b_bench.mjs                      # starts build/moat serve itself (MOAT_BIN)
//   E2B_API_URL=http://127.0.0.1:7070 E2B_SANDBOX_URL=http://127.0.0.1:7070 \
//   E2B_API_KEY=e2b_... node bench/e2b_bench.mjs  # an already running daemon (the key is its token)
//
// What differs by design: the SDK runs `/bin/bash -l -c CMD` as user 1000 in
// a users-mode sandbox; /v1 runs `/bin/sh -c CMD` in a plain one.
// The SDK comes from tests/e2b/node_modules (cd tests/e2b && npm ci).
import crypto from 'node:crypto'
import fs from 'node:fs'
import { fileURLToPath } from 'node:url'

const root = new URL('..', import.meta.url)
const sdkPath = new URL('tests/e2b/node_modules/e2b/dist/index.mjs', root)
if (!fs.existsSync(fileURLToPath(sdkPath))) {
  console.error('e2b_bench: the e2b SDK is not installed: (cd tests/e2b && npm ci)')
  process.exit(2)
}
const { Sandbox } = await import(sdkPath.href)

const N = Number(process.env.BENCH_N || 30)
const CONC = Number(process.env.BENCH_CONCURRENT || 100)
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3)
const MiB = crypto.randomBytes(1 << 20)
const MiBab = MiB.buffer.slice(MiB.byteOffset, MiB.byteOffset + MiB.byteLength)

// ---- the daemon -------------------------------------------------------------------

let daemon = null
let url, token
if (process.env.E2B_API_URL && process.env.E2B_API_KEY) {
  url = process.env.E2B_API_URL.replace(/\/$/, '')
  token = process.env.E2B_API_KEY
  process.env.E2B_SANDBOX_URL ||= url
} else {
  // the optimised build by default: what ships
  process.env.MOAT_BIN ||= fileURLToPath(new URL('build/moat', root))
  const { Daemon } = await import(new URL('tests/e2b/harness.mjs', root).href)
  daemon = new Daemon({ args: ['--max-sandboxes', String(Math.max(1000, CONC * 2)), '--pool-users', '2'] })
  await daemon.start()
  daemon.useEnv()
  url = daemon.url
  token = daemon.token
}
const stop = async () => { if (daemon) await daemon.stop() }
process.on('SIGINT', () => { stop().finally(() => process.exit(130)) })

// ---- /v1 ----------------------------------------------------------------------------

async function v1(method, path, body, raw = false) {
  const headers = { Authorization: `Bearer ${token}` }
  let b = body
  if (body !== undefined && !raw) {
    b = JSON.stringify(body)
    headers['Content-Type'] = 'application/json'
  }
  const r = await fetch(url + path, { method, headers, body: b, signal: AbortSignal.timeout(120_000) })
  const buf = Buffer.from(await r.arrayBuffer())
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${buf.toString().slice(0, 300)}`)
  return buf
}
const v1create = async () => JSON.parse(await v1('POST', '/v1/sandboxes', {})).id
const v1exec = async (id) => {
  const j = JSON.parse(await v1('POST', `/v1/sandboxes/${id}/exec`, { cmd: 'true' }))
  if (j.exit_code !== 0) throw new Error(`/v1 exec: ${JSON.stringify(j)}`)
}
const v1rm = (id) => v1('DELETE', `/v1/sandboxes/${id}`).catch(() => {})

// ---- measuring ------------------------------------------------------------------------

const ms = () => Number(process.hrtime.bigint()) / 1e6
async function timed(fn) {
  const t = ms()
  await fn()
  return ms() - t
}
function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b)
  if (!s.length) return NaN
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]
}
const rows = []
function report(op, e2b, mine) {
  rows.push({ op, e2b, v1: mine })
  const f = (x) => x.toFixed(2).padStart(9)
  console.log(`${op.padEnd(34)} e2b median ${f(pct(e2b, 50))} p90 ${f(pct(e2b, 90))} | v1 median ${f(pct(mine, 50))} ` +
    `p90 ${f(pct(mine, 90))} | ratio ${(pct(e2b, 50) / pct(mine, 50)).toFixed(2)}`)
}

try {
  console.log(`e2b_bench: ${url}, N=${N}, concurrent=${CONC} x ${ROUNDS}`)

  // (a) create to first command answered
  {
    const e = [], m = []
    for (let i = 0; i < N; i++) {
      let s
      e.push(await timed(async () => {
        s = await Sandbox.create()
        await s.commands.run('true')
      }))
      await s.kill()
      let id
      m.push(await timed(async () => {
        id = await v1create()
        await v1exec(id)
      }))
      await v1rm(id)
    }
    report('(a) create + first run', e, m)
  }

  // (a2) the same operation: a sandbox with users through /v1, and the
  // command E2B runs; (a3) both with a pause between creates, so that
  // each is served from the pool (--pool, --pool-users) as an agent with
  // think time would be
  for (const pause of [0, 400]) {
    const e = [], m = []
    for (let i = 0; i < N; i++) {
      if (pause) await new Promise((r) => setTimeout(r, pause))
      let s
      e.push(await timed(async () => {
        s = await Sandbox.create()
        await s.commands.run('true')
      }))
      await s.kill()
      if (pause) await new Promise((r) => setTimeout(r, pause))
      let id
      m.push(await timed(async () => {
        id = JSON.parse(await v1('POST', '/v1/sandboxes', { users: true })).id
        const j = JSON.parse(await v1('POST', `/v1/sandboxes/${id}/exec`,
          { cmd: ['/bin/bash', '-l', '-c', 'true'] }))
        if (j.exit_code !== 0) throw new Error(`/v1 exec: ${JSON.stringify(j)}`)
      }))
      await v1rm(id)
    }
    report(pause ? '(a3) same, from the pool' : '(a2) same: users, bash -l', e, m)
  }

  // (b) one command in a running sandbox
  {
    const s = await Sandbox.create()
    const id = await v1create()
    for (let i = 0; i < 5; i++) { await s.commands.run('true'); await v1exec(id) } // warm-up
    const e = [], m = []
    for (let i = 0; i < N; i++) {
      e.push(await timed(() => s.commands.run('true')))
      m.push(await timed(() => v1exec(id)))
    }
    report("(b) run('true')", e, m)
    // (b2) the same operation on the same sandbox: what the door (and the
    // SDK) costs over /v1, with the command E2B runs (/bin/bash -l -c true,
    // as user 1000 in the copy-on-write root) on both sides
    const same = async () => {
      const j = JSON.parse(await v1('POST', `/v1/sandboxes/${s.sandboxId}/exec`,
        { cmd: ['/bin/bash', '-l', '-c', 'true'] }))
      if (j.exit_code !== 0) throw new Error(`/v1 exec: ${JSON.stringify(j)}`)
    }
    const e3 = [], m3 = []
    for (let i = 0; i < N; i++) {
      e3.push(await timed(() => s.commands.run('true')))
      m3.push(await timed(same))
    }
    report("(b2) same sandbox, bash -l -c true", e3, m3)

    // (c) 1 MiB write then read
    const e2 = [], m2 = []
    for (let i = 0; i < N; i++) {
      e2.push(await timed(async () => {
        await s.files.write('/home/user/bench.bin', MiBab)
        const back = await s.files.read('/home/user/bench.bin', { format: 'bytes' })
        if (back.length !== MiB.length) throw new Error(`e2b read ${back.length} bytes`)
      }))
      m2.push(await timed(async () => {
        await v1('PUT', `/v1/sandboxes/${id}/files?path=bench.bin`, MiB, true)
        const back = await v1('GET', `/v1/sandboxes/${id}/files?path=bench.bin`)
        if (back.length !== MiB.length) throw new Error(`/v1 read ${back.length} bytes`)
      }))
    }
    report('(c) write + read 1 MiB', e2, m2)
    await s.kill()
    await v1rm(id)
  }

  // (d) CONC creates at once: each create's latency, and the batch's wall time
  {
    const e = [], m = [], ew = [], mw = []
    for (let r = 0; r < ROUNDS; r++) {
      let boxes = []
      ew.push(await timed(async () => {
        boxes = await Promise.all(Array.from({ length: CONC }, async () => {
          const t = ms()
          const s = await Sandbox.create({ requestTimeoutMs: 300_000 })
          e.push(ms() - t)
          return s
        }))
      }))
      await Promise.all(boxes.map((s) => s.kill().catch(() => {})))
      let ids = []
      mw.push(await timed(async () => {
        ids = await Promise.all(Array.from({ length: CONC }, async () => {
          const t = ms()
          const id = await v1create()
          m.push(ms() - t)
          return id
        }))
      }))
      await Promise.all(ids.map(v1rm))
    }
    report(`(d) ${CONC} concurrent: per create`, e, m)
    report(`(d) ${CONC} concurrent: batch wall`, ew, mw)
  }
  if (process.env.BENCH_JSON) fs.writeFileSync(process.env.BENCH_JSON, JSON.stringify(rows, null, 1))
} finally {
  await stop()
}

// Shared by the node end-to-end suites (tests/e2b, tests/mcp, clients/js/test):
// a `moat serve` daemon on a free loopback port with a private --data
// directory and a token file, moat's /v1 API, and bounded waits.
//
// Like tests/e2e (conftest.py, test_serve.py Daemon): everything lives under a
// fresh /tmp/moat-node-<id>/ removed afterwards; sandboxes are deleted through
// moat's own /v1 API, then any agent left over is killed by pid, and the
// moat-<pid>-* cgroups of our daemons are removed. Every wait is bounded.
// Pure node: no npm package is needed to import it.
//
// MOAT_BIN: the moat binary (default build/san/moat); moat-serve and
// moat-agent must sit next to it. MOAT_NODE_KEEP=1 (or MOAT_E2B_KEEP=1)
// keeps the directory (logs).
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { after, before } from 'node:test'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
export const MOAT_BIN = path.resolve(process.env.MOAT_BIN || path.join(here, '..', '..', 'build', 'san', 'moat'))
export const IS_ROOT = process.getuid() === 0
export const START_TIMEOUT_MS = 30_000

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
export const tag = (n = 6) => crypto.randomBytes(n).toString('hex')

/** Resolve p, or reject after ms naming what was awaited (no test hangs). */
export async function withTimeout(p, ms, what) {
  let t
  const timer = new Promise((_, rej) => {
    t = setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms)
  })
  try {
    return await Promise.race([p, timer])
  } finally {
    clearTimeout(t)
  }
}

/** Poll pred (may be async) until truthy; its value, or throw after timeout. */
export async function waitFor(pred, { timeout = 10_000, step = 50, what = 'condition' } = {}) {
  const end = Date.now() + timeout
  let last
  for (;;) {
    try {
      const v = await pred()
      if (v) return v
    } catch (e) {
      last = e
    }
    if (Date.now() > end) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what}${last ? `: ${last.message}` : ''}`)
    }
    await sleep(step)
  }
}

/** The promise's rejection (fails when it resolves), bounded. */
export async function rejection(p, ms = 60_000, what = 'a rejection') {
  let v
  try {
    v = await withTimeout(p, ms, what)
  } catch (e) {
    return e
  }
  throw new Error(`expected ${what}, got a result: ${JSON.stringify(v)?.slice(0, 300)}`)
}

export async function freePort(host = '127.0.0.1') {
  return await new Promise((resolve, reject) => {
    const s = net.createServer()
    s.once('error', reject)
    s.listen(0, host, () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
  })
}

// ---- /proc ---------------------------------------------------------------------

function comm(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim()
  } catch {
    return ''
  }
}

function ppidMap() {
  const m = new Map()
  for (const n of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(n)) continue
    try {
      const s = fs.readFileSync(`/proc/${n}/stat`, 'utf8')
      const f = s.slice(s.lastIndexOf(')') + 2).split(' ')
      m.set(Number(n), Number(f[1]))
    } catch {}
  }
  return m
}

function descendants(pids) {
  const m = ppidMap()
  const out = new Set()
  let grew = true
  const roots = new Set(pids)
  while (grew) {
    grew = false
    for (const [p, pp] of m) {
      if ((roots.has(pp) || out.has(pp)) && !out.has(p)) {
        out.add(p)
        grew = true
      }
    }
  }
  return [...out]
}

export function alive(pid) {
  try {
    const st = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
    return !/^State:\s*Z/m.test(st)
  } catch {
    return false
  }
}

function cgroupDirsOf(daemonPid) {
  const found = []
  let lines = []
  try {
    lines = fs.readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n')
  } catch {}
  const bases = new Set()
  for (const l of lines) {
    const [, ctrls, p] = l.split(':')
    const own = p && p !== '/' ? p : ''
    if (ctrls === '') bases.add(`/sys/fs/cgroup${own}`)
    for (const c of ['memory', 'pids', 'cpu']) {
      if (ctrls.split(',').includes(c)) bases.add(`/sys/fs/cgroup/${c}${own}`)
    }
  }
  for (const b of bases) {
    try {
      for (const n of fs.readdirSync(b)) if (n.startsWith(`moat-${daemonPid}-`)) found.push(path.join(b, n))
    } catch {}
  }
  return found
}

// ---- the daemon ------------------------------------------------------------------

const live = new Set()
process.on('exit', () => {
  // last resort (a test runner timeout): never leave a daemon behind
  for (const d of live) {
    try {
      d.proc?.kill('SIGKILL')
    } catch {}
  }
})

export class Daemon {
  /** args: extra `moat serve` flags; env: added to the daemon's environment. */
  constructor({ args = [], env = {} } = {}) {
    for (const b of ['moat-serve', 'moat-agent']) {
      const p = path.join(path.dirname(MOAT_BIN), b)
      try {
        fs.accessSync(p, fs.constants.X_OK)
      } catch {
        throw new Error(`${p} is not executable: build it (make build/san/moat-serve build/san/moat-agent) or set MOAT_BIN`)
      }
    }
    this.base = fs.mkdtempSync(this.constructor.tmpPrefix || '/tmp/moat-node-')
    fs.chmodSync(this.base, 0o755)
    this.data = path.join(this.base, 'data')
    this.tokenFile = path.join(this.base, 'token')
    this.token = 'e2b_' + crypto.randomBytes(20).toString('hex')
    fs.writeFileSync(this.tokenFile, this.token + '\n', { mode: 0o600 })
    this.args = args
    this.env = env
    this.pids = []
    this.agents = new Set()
    this.proc = null
    this.nstart = 0
  }

  /** Start (or restart: the same data dir; port: the same port if given). */
  async start({ port } = {}) {
    this.port = port ?? (await freePort())
    this.url = `http://127.0.0.1:${this.port}`
    this.nstart++
    this.logPath = path.join(this.base, `serve-${this.nstart}.log`)
    const log = fs.openSync(this.logPath, 'w')
    const env = { ...process.env, ...this.env }
    delete env.MOAT_API_TOKEN
    for (const k of Object.keys(env)) if (k.startsWith('E2B_')) delete env[k]
    this.proc = spawn(MOAT_BIN, ['serve', '--listen', `127.0.0.1:${this.port}`, '--data', this.data,
      '--token-file', this.tokenFile, ...this.args], { stdio: ['ignore', log, log], env })
    fs.closeSync(log)
    this.exited = new Promise((r) => this.proc.once('exit', (code, sig) => r({ code, sig })))
    this.pids.push(this.proc.pid)
    live.add(this)
    const proc = this.proc
    let gone = false
    this.exited.then(() => { gone = true })
    try {
      await waitFor(async () => {
        if (gone) throw new Error('moat serve exited')
        return await this.healthy()
      }, { timeout: START_TIMEOUT_MS, step: 100, what: `moat serve on port ${this.port}` })
    } catch (e) {
      const out = this.log()
      await this.stop()
      throw new Error(`moat serve (${MOAT_BIN}) did not come up on port ${this.port} (${e.message}):\n${out}`)
    }
    try {
      await this.ready()
    } catch (e) {
      await this.stop()
      throw e
    }
    return proc
  }

  /** After /healthz answers: a subclass checks what it needs (a door). */
  async ready() {}

  async healthy() {
    try {
      const r = await fetch(`${this.url}/healthz`, { signal: AbortSignal.timeout(2000) })
      await r.arrayBuffer()
      return r.status === 200
    } catch {
      return false
    }
  }

  log(n) {
    try {
      return fs.readFileSync(n ? path.join(this.base, `serve-${n}.log`) : this.logPath, 'utf8')
    } catch {
      return ''
    }
  }

  get running() {
    return this.proc && this.proc.exitCode === null && this.proc.signalCode === null
  }

  /** moat's own /v1 API. */
  async v1(method, p, body, { headers = {}, timeout = 30_000 } = {}) {
    const h = { Authorization: `Bearer ${this.token}`, ...headers }
    let b = body
    if (body && typeof body === 'object' && !(body instanceof Uint8Array) && !(body instanceof ArrayBuffer)) {
      b = JSON.stringify(body)
      h['Content-Type'] = 'application/json'
    }
    const r = await fetch(this.url + p, { method, headers: h, body: b, signal: AbortSignal.timeout(timeout) })
    const buf = Buffer.from(await r.arrayBuffer())
    return { status: r.status, headers: r.headers, body: buf, json: () => JSON.parse(buf.toString()) }
  }

  noteAgents() {
    for (const p of descendants(this.pids)) if (comm(p) === 'moat-agent') this.agents.add(p)
  }

  async kill9() {
    this.noteAgents()
    if (this.running) {
      this.proc.kill('SIGKILL')
      await withTimeout(this.exited, 10_000, 'moat serve to die of SIGKILL')
    }
    live.delete(this)
  }

  /** Delete what is left, stop the daemon, kill leftover agents, clean up. */
  async stop() {
    try {
      if (this.running) {
        try {
          const r = await this.v1('GET', '/v1/sandboxes', undefined, { timeout: 20_000 })
          if (r.status === 200) {
            await Promise.all((r.json().sandboxes || []).map((b) =>
              this.v1('DELETE', `/v1/sandboxes/${b.id}`, undefined, { timeout: 20_000 }).catch(() => {})))
          }
        } catch {}
        // and through the door, in case its sandboxes are not all in /v1's list
        try {
          const h = { 'X-API-KEY': this.token }
          const r = await fetch(`${this.url}/v2/sandboxes?limit=1000`, { headers: h, signal: AbortSignal.timeout(20_000) })
          const list = r.status === 200 ? await r.json() : []
          await Promise.all((Array.isArray(list) ? list : []).map((b) =>
            fetch(`${this.url}/sandboxes/${b.sandboxID}`, { method: 'DELETE', headers: h, signal: AbortSignal.timeout(20_000) })
              .then((x) => x.arrayBuffer()).catch(() => {})))
        } catch {}
        this.noteAgents()
        this.proc.kill('SIGTERM')
        try {
          await withTimeout(this.exited, 20_000, 'moat serve to stop on SIGTERM')
        } catch {
          this.proc.kill('SIGKILL')
          await withTimeout(this.exited, 10_000, 'moat serve to die of SIGKILL').catch(() => {})
        }
      }
      this.noteAgents()
    } finally {
      live.delete(this)
      const left = [...this.agents].filter((p) => alive(p) && comm(p) === 'moat-agent')
      for (const p of left) {
        try {
          process.kill(p, 'SIGKILL')
        } catch {}
      }
      await waitFor(() => left.every((p) => !alive(p) || comm(p) !== 'moat-agent'), { timeout: 5000 }).catch(() => {})
      for (const pid of this.pids) {
        for (const d of cgroupDirsOf(pid)) {
          for (let i = 0; i < 20; i++) {
            try {
              fs.rmdirSync(d)
              break
            } catch (e) {
              if (e.code === 'ENOENT') break
              await sleep(100)
            }
          }
        }
      }
      if (process.env.MOAT_NODE_KEEP !== '1' && process.env.MOAT_E2B_KEEP !== '1') {
        try {
          fs.rmSync(this.base, { recursive: true, force: true, maxRetries: 3 })
        } catch {}
      }
    }
  }
}

/**
 * A Daemon (opts as the constructor's) for the test file or describe block
 * this is called in: its before hook starts it, its after hook stops it.
 * (Node runs a scope's before hooks side by side: a hook that needs the
 * daemon up belongs in a test, or starts the daemon itself.)
 */
export function useDaemon(opts) {
  const d = new Daemon(opts)
  before(() => d.start())
  after(() => d.stop())
  return d
}

export const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex')

// `moat mcp` (the stdio relay) against a scripted HTTP server standing in
// for the daemon's /mcp, for what a real daemon cannot be made to do on
// demand: answer 500, hold a request open while the cancellation for it
// must get through, stream events slowly, forget a session. What the
// server received is checked here (headers, connections, DELETE at the
// end); every line moat mcp writes to stdout must be a JSON-RPC message.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import http from 'node:http'
import { after, before, beforeEach, describe, test } from 'node:test'

import { MOAT_BIN, freePort, waitFor, withTimeout } from '../node/daemon.mjs'
import { relayEnv } from './harness.mjs'

const TOKEN = 'e2b_' + 'ab'.repeat(20)

/** The scripted server: a handler per JSON-RPC method, a log of requests. */
class Script {
  async start() {
    this.port = await freePort()
    this.url = `http://127.0.0.1:${this.port}`
    this.reset()
    this.server = http.createServer((req, res) => this.serve(req, res))
    this.server.keepAliveTimeout = 30_000
    await new Promise((r) => this.server.listen(this.port, '127.0.0.1', r))
  }

  reset() {
    this.log = []
    this.handlers = {}
  }

  async stop() {
    this.server.closeAllConnections?.()
    await new Promise((r) => this.server.close(r))
  }

  serve(req, res) {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString()
      const entry = { method: req.method, path: req.url, headers: req.headers, text, socket: req.socket.remotePort }
      try {
        entry.body = text ? JSON.parse(text) : undefined
      } catch {}
      this.log.push(entry)
      if (req.method === 'DELETE') {
        res.writeHead(204).end()
        return
      }
      const m = entry.body
      const h = this.handlers[m?.method] ?? (m?.method === 'initialize' ? initOk : m?.id === undefined ? accepted : echo)
      h(m, res, entry)
    })
  }
}

function json(res, status, body, headers = {}) {
  const b = JSON.stringify(body)
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(b), ...headers })
  res.end(b)
}
const initOk = (m, res) => json(res, 200, {
  jsonrpc: '2.0', id: m.id,
  result: { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'script', version: '0' } },
}, { 'Mcp-Session-Id': 'sess-42' })
const accepted = (m, res) => res.writeHead(202).end()
const echo = (m, res) => json(res, 200, { jsonrpc: '2.0', id: m.id, result: { echoed: m.method } })

/** A running `moat mcp`: write messages, wait for stdout lines. */
class Relay {
  constructor(url, token = TOKEN) {
    this.p = spawn(MOAT_BIN, ['mcp'], { env: relayEnv(url, token), stdio: ['pipe', 'pipe', 'pipe'] })
    this.lines = []
    this.err = ''
    let buf = ''
    this.p.stdout.on('data', (b) => {
      buf += b
      let i
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i)
        buf = buf.slice(i + 1)
        // stdout carries protocol messages only
        const m = JSON.parse(line)
        assert.equal(m.jsonrpc, '2.0', line)
        this.lines.push(m)
      }
    })
    this.p.stderr.on('data', (b) => { this.err += b })
    this.exited = new Promise((r) => this.p.once('exit', (code, sig) => r({ code, sig })))
  }

  send(...msgs) {
    for (const m of msgs) this.p.stdin.write((typeof m === 'string' ? m : JSON.stringify(m)) + '\n')
  }

  /** The first stdout message matching pred (waits for it). */
  async expect(pred, what, timeout = 10_000) {
    return await waitFor(() => this.lines.find(pred), { timeout, step: 20, what: `${what}; stdout so far: ${JSON.stringify(this.lines).slice(0, 500)}; stderr: ${this.err}` })
  }

  answer(id, what) {
    return this.expect((m) => m.id === id && ('result' in m || 'error' in m), what ?? `the answer to ${id}`)
  }

  async end() {
    this.p.stdin.end()
    const st = await withTimeout(this.exited, 15_000, 'moat mcp to exit at the end of stdin')
    // the sanitizer build reports leaks and memory errors on stderr at exit
    assert.doesNotMatch(this.err, /Sanitizer/, this.err)
    return st
  }

  kill() {
    if (this.p.exitCode === null) this.p.kill('SIGKILL')
  }
}

const INIT = {
  jsonrpc: '2.0', id: 0, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
}

describe('moat mcp, the relay, against a scripted server', () => {
  const s = new Script()
  let r
  before(async () => { await s.start() })
  after(async () => { await s.stop() })
  beforeEach(() => {
    r?.kill()
    s.reset()
  })

  test('the session id and protocol version of the initialize answer go on every later message; DELETE at the end of stdin', async () => {
    r = new Relay(s.url)
    r.send(INIT)
    assert.equal((await r.answer(0)).result.protocolVersion, '2025-06-18')
    r.send({ jsonrpc: '2.0', method: 'notifications/initialized' }, { jsonrpc: '2.0', id: 1, method: 'tools/list' })
    assert.deepEqual((await r.answer(1)).result, { echoed: 'tools/list' })
    const { code } = await r.end()
    assert.equal(code, 0, r.err)
    const [init, ...rest] = s.log
    assert.equal(init.headers['mcp-session-id'], undefined)
    assert.equal(init.headers.authorization, `Bearer ${TOKEN}`)
    assert.match(init.headers.accept, /application\/json/)
    assert.match(init.headers.accept, /text\/event-stream/)
    assert.equal(init.headers['content-type'], 'application/json')
    assert.equal(init.text, JSON.stringify(INIT), 'the message is POSTed as it was written')
    assert.deepEqual(rest.map((e) => e.method), ['POST', 'POST', 'DELETE'])
    for (const e of rest) {
      assert.equal(e.path, '/mcp')
      assert.equal(e.headers['mcp-session-id'], 'sess-42')
      assert.equal(e.headers['mcp-protocol-version'], '2025-06-18')
      assert.equal(e.headers.authorization, `Bearer ${TOKEN}`)
    }
    // a notification's 202 writes nothing
    assert.equal(r.lines.length, 2)
  })

  test('a line that is not JSON gets -32700 back, and the next line goes on', async () => {
    r = new Relay(s.url)
    r.send('{"jsonrpc": "2.0", "id": 1, "method": ', { jsonrpc: '2.0', id: 2, method: 'ping' })
    const pe = await r.expect((m) => m.error?.code === -32700, 'a parse error')
    assert.equal(pe.id, null)
    assert.match(pe.error.message, /line 1/)
    await r.answer(2)
    assert.equal(s.log.length, 1, 'the bad line was not sent')
    assert.equal((await r.end()).code, 0)
  })

  test('a line over the bound (64 MiB) is refused clearly, and the next line goes on', async () => {
    r = new Relay(s.url)
    const big = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":"' + 'a'.repeat(64 << 20) + '"}}'
    r.p.stdin.write(big + '\n')
    r.send({ jsonrpc: '2.0', id: 2, method: 'ping' })
    const pe = await r.expect((m) => m.error?.code === -32700, 'the error for the long line', 30_000)
    assert.match(pe.error.message, /longer than 64 MiB/)
    await r.answer(2, 'the answer after the long line')
    assert.equal(s.log.length, 1)
    assert.match(r.err, /longer than 64 MiB/)
    assert.equal((await r.end()).code, 0)
  })

  test('an event stream answer is written message by message, as it arrives', async () => {
    let release
    const gate = new Promise((res) => { release = res })
    s.handlers['tools/call'] = async (m, res) => {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' })
      res.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'p', progress: 1 } })}\n\n`)
      await gate
      // a multi-line data field and CRLF line ends are one message too
      const fin = JSON.stringify({ jsonrpc: '2.0', id: m.id, result: { content: [] } }, null, 1)
      res.end(': a comment\r\n' + fin.split('\n').map((l) => `data: ${l}`).join('\r\n') + '\r\n\r\n')
    }
    r = new Relay(s.url)
    r.send({ jsonrpc: '2.0', id: 'c1', method: 'tools/call', params: {} })
    const prog = await r.expect((m) => m.method === 'notifications/progress', 'the progress event before the end of the stream')
    assert.equal(prog.params.progress, 1)
    assert.equal(r.lines.length, 1, 'only the first event so far')
    release()
    assert.deepEqual((await r.answer('c1')).result, { content: [] })
    assert.equal((await r.end()).code, 0)
  })

  test('notifications/cancelled reaches the server on a second connection while the request waits', async () => {
    let held
    s.handlers['tools/call'] = (m, res) => { held = { m, res } }
    s.handlers['notifications/cancelled'] = (m, res, entry) => {
      res.writeHead(202).end()
      // the cancelled request is answered only now: it was still open
      if (held) json(held.res, 200, { jsonrpc: '2.0', id: held.m.id, error: { code: -32800, message: 'cancelled' } })
    }
    r = new Relay(s.url)
    r.send({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'exec' } })
    await waitFor(() => held, { what: 'the request at the server' })
    r.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 7, reason: 'user' } })
    const a = await r.answer(7, 'the cancelled request to end')
    assert.equal(a.error.code, -32800)
    const call = s.log.find((e) => e.body?.method === 'tools/call')
    const cancel = s.log.find((e) => e.body?.method === 'notifications/cancelled')
    assert.ok(cancel, 'the cancellation was not sent')
    assert.notEqual(call.socket, cancel.socket, 'the cancellation came on the connection of the waiting request')
    assert.equal((await r.end()).code, 0)
  })

  test('a cancelled request the server ends with 202 gets no made-up answer', async () => {
    let held
    s.handlers['tools/call'] = (m, res) => { held = res }
    s.handlers['notifications/cancelled'] = (m, res) => {
      res.writeHead(202).end()
      held?.writeHead(202).end() // as moat serve does: no answer to a cancelled request
    }
    r = new Relay(s.url)
    r.send({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'exec' } })
    await waitFor(() => held, { what: 'the request at the server' })
    r.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 7 } },
      { jsonrpc: '2.0', id: 8, method: 'ping' })
    await r.answer(8)
    assert.equal((await r.end()).code, 0)
    assert.deepEqual(r.lines.map((m) => m.id), [8])
    assert.equal(r.err, '')
  })

  test('a request cancelled before it could be sent is never sent', async () => {
    let release
    s.handlers.initialize = (m, res) => { release = () => initOk(m, res) }
    r = new Relay(s.url)
    r.send(INIT)
    await waitFor(() => release, { what: 'initialize at the server' })
    // both wait for the session id, then the cancel wins
    r.send({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'exec' } },
      { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 5 } },
      { jsonrpc: '2.0', id: 6, method: 'ping' })
    await new Promise((res) => setTimeout(res, 200))
    release()
    await r.answer(6)
    assert.equal((await r.end()).code, 0)
    const methods = s.log.filter((e) => e.method === 'POST').map((e) => e.body.method)
    assert.deepEqual(methods, ['initialize', 'notifications/cancelled', 'ping'])
    assert.deepEqual(r.lines.map((m) => m.id), [0, 6])
  })

  test('a long request does not hold back the next ones', async () => {
    let held
    s.handlers['tools/call'] = (m, res) => { held = { m, res } }
    r = new Relay(s.url)
    r.send({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: {} }, { jsonrpc: '2.0', id: 2, method: 'ping' })
    await r.answer(2, 'the ping while tools/call waits')
    assert.ok(held && !r.lines.some((m) => m.id === 1))
    json(held.res, 200, { jsonrpc: '2.0', id: 1, result: {} })
    await r.answer(1)
    assert.equal((await r.end()).code, 0)
  })

  for (const status of [401, 404, 500, 503]) {
    test(`HTTP ${status}: a JSON-RPC error for the request naming the URL and the status, and a line on stderr`, async () => {
      s.handlers.ping = (m, res) => json(res, status, { jsonrpc: '2.0', id: null, error: { code: -32001, message: `scripted ${status}` } })
      s.handlers['notifications/x'] = (m, res) => res.writeHead(status).end('plain text')
      r = new Relay(s.url)
      r.send({ jsonrpc: '2.0', method: 'notifications/x' }, { jsonrpc: '2.0', id: 'p', method: 'ping' })
      const a = await r.answer('p')
      assert.ok(a.error.message.includes(`${s.url}/mcp`), a.error.message)
      assert.ok(a.error.message.includes(`HTTP ${status}`), a.error.message)
      assert.ok(a.error.message.includes(`scripted ${status}`), a.error.message)
      assert.equal(a.error.data.status, status)
      assert.equal(a.error.data.url, `${s.url}/mcp`)
      assert.equal((await r.end()).code, 0)
      assert.equal(r.lines.length, 1, 'the failed notification wrote nothing on stdout')
      assert.equal(r.err.split('\n').filter((l) => l.includes(`HTTP ${status}`)).length, 2, r.err)
    })
  }

  test('a request answered 202 or with nothing for it: an error, not a wait', async () => {
    s.handlers.ping = (m, res) => res.writeHead(202).end()
    s.handlers['tools/list'] = (m, res) => json(res, 200, { jsonrpc: '2.0', id: 'other', result: {} })
    r = new Relay(s.url)
    r.send({ jsonrpc: '2.0', id: 1, method: 'ping' }, { jsonrpc: '2.0', id: 2, method: 'tools/list' })
    assert.match((await r.answer(1)).error.message, /without a response/)
    assert.match((await r.answer(2)).error.message, /without a response/)
    assert.equal((await r.end()).code, 0)
  })

  test('an answer that is not JSON: an error naming the URL', async () => {
    s.handlers.ping = (m, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' })
      res.end('<html>proxy</html>')
    }
    r = new Relay(s.url)
    r.send({ jsonrpc: '2.0', id: 1, method: 'ping' })
    assert.ok((await r.answer(1)).error.message.includes(`${s.url}/mcp`))
    assert.equal((await r.end()).code, 0)
  })

  test('a protocolVersion with a line break in the initialize answer is not sent on as a header (no header injection)', async () => {
    s.handlers.initialize = (m, res) => json(res, 200, {
      jsonrpc: '2.0', id: m.id,
      result: { protocolVersion: '2025-06-18\r\nX-Injected: yes', capabilities: {}, serverInfo: { name: 's', version: '0' } },
    }, { 'Mcp-Session-Id': 'sess-42' })
    r = new Relay(s.url)
    r.send(INIT)
    await r.answer(0)
    r.send({ jsonrpc: '2.0', id: 1, method: 'ping' })
    await r.answer(1)
    assert.equal((await r.end()).code, 0)
    for (const e of s.log.slice(1)) {
      assert.equal(e.headers['x-injected'], undefined, JSON.stringify(e.headers))
      assert.equal(e.headers['mcp-protocol-version'], undefined, JSON.stringify(e.headers))
      assert.equal(e.headers['mcp-session-id'], 'sess-42')
    }
    assert.match(r.err, /protocolVersion/)
  })

  test('SIGTERM: moat mcp ends its session and exits', async () => {
    s.handlers['tools/call'] = () => {} // never answered
    r = new Relay(s.url)
    r.send(INIT)
    await r.answer(0)
    r.send({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: {} })
    await waitFor(() => s.log.some((e) => e.body?.method === 'tools/call'), { what: 'the call at the server' })
    r.p.kill('SIGTERM')
    const { code } = await withTimeout(r.exited, 15_000, 'moat mcp to exit on SIGTERM')
    assert.equal(code, 0)
    assert.doesNotMatch(r.err, /Sanitizer/, r.err)
    const del = s.log.find((e) => e.method === 'DELETE')
    assert.ok(del, 'no DELETE /mcp')
    assert.equal(del.headers['mcp-session-id'], 'sess-42')
  })
})

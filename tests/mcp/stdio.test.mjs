// MCP over stdio: the official SDK Client spawning `moat mcp` (the relay in
// moat-client) against a real daemon. The tool tests are suite.mjs's.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { describe, test } from 'node:test'

import { useDaemon, MOAT_BIN, alive, freePort, waitFor, withTimeout } from '../node/daemon.mjs'
import { INIT, connectStdio, relayEnv } from './harness.mjs'
import { defineSuite } from './suite.mjs'

defineSuite('stdio')

/** Run `moat mcp` with these stdin lines; its exit status, stdout lines, stderr. */
async function relayOnce(env, lines) {
  const p = spawn(MOAT_BIN, ['mcp'], { env, stdio: ['pipe', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  p.stdout.on('data', (b) => { out += b })
  p.stderr.on('data', (b) => { err += b })
  const exited = new Promise((r) => p.once('exit', (code, sig) => r({ code, sig })))
  p.stdin.end(lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l)) + '\n').join(''))
  const { code, sig } = await withTimeout(exited, 30_000, 'moat mcp to exit')
  assert.doesNotMatch(err, /Sanitizer/, err)
  return { code, sig, out: out.split('\n').filter(Boolean).map((l) => JSON.parse(l)), err }
}


describe('moat mcp against a real daemon: failures and the end of stdin', () => {
  const d = useDaemon()

  test('a wrong token: the SDK\'s initialize fails with an error naming the URL and 401', async () => {
    const e = await connectStdio(d, { token: 'e2b_' + '0'.repeat(40) }).then(() => null, (x) => x)
    assert.ok(e, 'connect succeeded with a wrong token')
    assert.match(e.message, /401/)
    assert.ok(e.message.includes(`${d.url}/mcp`), e.message)
    assert.match(e.stderr, /401/)
  })

  test('no token at all: the same clear error', async () => {
    const r = await relayOnce(relayEnv(d.url, undefined), [INIT])
    assert.equal(r.code, 0)
    assert.equal(r.out.length, 1)
    assert.equal(r.out[0].id, 1)
    assert.match(r.out[0].error.message, new RegExp(`${d.url}/mcp.*401`))
    assert.equal(r.out[0].error.data.status, 401)
    assert.match(r.err, /401/)
  })

  test('a daemon that is not there: an error naming the URL, for each request', async () => {
    const url = `http://127.0.0.1:${await freePort()}`
    const r = await relayOnce(relayEnv(url, d.token), [INIT, { jsonrpc: '2.0', id: 'two', method: 'ping' }])
    assert.equal(r.code, 0)
    assert.deepEqual(r.out.map((m) => m.id).sort(), [1, 'two'].sort())
    for (const m of r.out) assert.ok(m.error.message.includes(`${url}/mcp`), m.error.message)
    assert.match(r.err, /cannot reach/)
  })

  test('stdin piped from a file: every answer comes out, then moat mcp exits 0', async () => {
    const r = await relayOnce(relayEnv(d.url, d.token), [
      INIT,
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      'this is not JSON',
      { jsonrpc: '2.0', id: 2, method: 'tools/list' },
      { jsonrpc: '2.0', id: 3, method: 'ping' },
    ])
    assert.equal(r.code, 0, r.err)
    const byId = new Map(r.out.map((m) => [JSON.stringify(m.id), m]))
    assert.equal(byId.get('1').result.protocolVersion, '2025-06-18')
    assert.equal(byId.get('null').error.code, -32700)
    assert.ok(byId.get('2').result.tools.length >= 10)
    assert.deepEqual(byId.get('3').result, {})
  })

  test('a message over the daemon\'s body limit: an error naming HTTP 413, and the session goes on', async () => {
    const big = { jsonrpc: '2.0', id: 2, method: 'tools/call',
      params: { name: 'write_file', arguments: { id: 'x', path: 'big', content: 'a'.repeat(17 << 20) } } }
    const r = await relayOnce(relayEnv(d.url, d.token), [
      INIT,
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      big,
      { jsonrpc: '2.0', id: 3, method: 'ping' },
    ])
    assert.equal(r.code, 0, r.err)
    const byId = new Map(r.out.map((m) => [m.id, m]))
    assert.match(byId.get(2).error.message, /HTTP 413/)
    assert.equal(byId.get(2).error.data.status, 413)
    assert.deepEqual(byId.get(3).result, {})
  })

  test('closing the client ends moat mcp', async () => {
    const conn = await connectStdio(d)
    const pid = conn.transport.pid
    assert.ok(pid && alive(pid))
    await conn.close()
    await waitFor(() => !alive(pid), { timeout: 10_000, what: 'moat mcp to exit' })
  })
})

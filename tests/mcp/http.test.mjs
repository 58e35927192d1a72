// MCP over Streamable HTTP: the official SDK Client at the daemon's /mcp.
// The tool tests are suite.mjs's; here also what HTTP alone has (auth,
// sessions).
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'

import { useDaemon } from '../node/daemon.mjs'
import { INIT, connectHttp } from './harness.mjs'
import { defineSuite } from './suite.mjs'

defineSuite('http')

const HDRS = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' }

describe('/mcp over HTTP: auth and sessions', () => {
  const d = useDaemon()

  const post = (body, headers = {}) => fetch(`${d.url}/mcp`, {
    method: 'POST', headers: { ...HDRS, ...headers }, body: JSON.stringify(body),
  })

  test('401 without a token, and with a wrong one; the SDK client cannot connect', async () => {
    let r = await post(INIT)
    assert.equal(r.status, 401)
    await r.arrayBuffer()
    r = await post(INIT, { Authorization: 'Bearer wrong' })
    assert.equal(r.status, 401)
    await r.arrayBuffer()
    const e = await connectHttp(d, { token: null }).then(() => null, (x) => x)
    assert.ok(e, 'the SDK connected without a token')
    assert.match(String(e.message ?? e), /401|nauthorized/)
  })

  test('sessions: the initialize answer names one; without it 400, after DELETE 404', async () => {
    const auth = { Authorization: `Bearer ${d.token}` }
    let r = await post(INIT, auth)
    assert.equal(r.status, 200)
    const sid = r.headers.get('mcp-session-id')
    assert.ok(sid && /^[\x21-\x7e]+$/.test(sid), `session id ${sid}`)
    const init = await r.json()
    assert.equal(init.result.protocolVersion, '2025-06-18')
    const ping = { jsonrpc: '2.0', id: 2, method: 'ping' }
    const v = { 'MCP-Protocol-Version': '2025-06-18' }

    r = await post(ping, { ...auth, ...v })
    assert.equal(r.status, 400)
    await r.arrayBuffer()
    r = await post(ping, { ...auth, ...v, 'Mcp-Session-Id': sid })
    assert.equal(r.status, 200)
    assert.deepEqual((await r.json()).result, {})

    r = await fetch(`${d.url}/mcp`, { method: 'DELETE', headers: { ...auth, ...v, 'Mcp-Session-Id': sid } })
    assert.ok([200, 204].includes(r.status), `DELETE: ${r.status}`)
    await r.arrayBuffer()
    r = await post(ping, { ...auth, ...v, 'Mcp-Session-Id': sid })
    assert.equal(r.status, 404)
    await r.arrayBuffer()
  })

  test('GET /mcp: 405 (no server-initiated stream), naming the methods allowed', async () => {
    const r = await fetch(`${d.url}/mcp`, { headers: { Authorization: `Bearer ${d.token}`, Accept: 'text/event-stream' } })
    assert.equal(r.status, 405)
    assert.match(r.headers.get('allow') ?? '', /POST/)
    await r.arrayBuffer()
  })

  test('the SDK client negotiates a version moat supports and ends its session', async () => {
    const conn = await connectHttp(d)
    assert.ok(conn.transport.sessionId)
    assert.ok(['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'].includes(conn.transport.protocolVersion),
      conn.transport.protocolVersion)
    const sid = conn.transport.sessionId
    await conn.close()
    const r = await post({ jsonrpc: '2.0', id: 9, method: 'ping' }, {
      Authorization: `Bearer ${d.token}`, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-06-18',
    })
    assert.equal(r.status, 404)
    await r.arrayBuffer()
  })
})

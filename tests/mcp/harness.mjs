// The two ways an MCP host reaches moat, for the suites of tests/mcp: the
// official SDK Client over stdio (spawning `moat mcp`, the relay) and over
// Streamable HTTP (the daemon's /mcp directly), against a real daemon
// started with tests/node/daemon.mjs. Plus small helpers shared by the
// suites: tool calls, moat's /v1 API, a PNG made here.
import zlib from 'node:zlib'

import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

import { MOAT_BIN, withTimeout } from '../node/daemon.mjs'

export const CLIENT_INFO = { name: 'moat-mcp-tests', version: '1.0.0' }
/** A raw initialize request, for the tests that speak JSON-RPC themselves. */
export const INIT = {
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
}

/** The environment of a spawned `moat mcp`: only what it needs. */
export function relayEnv(url, token, extra = {}) {
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', MOAT_URL: url, ...extra }
  if (token !== null && token !== undefined) env.MOAT_API_TOKEN = token
  return env
}

/**
 * A connected SDK Client over `moat mcp` (stdio).
 * @returns {{client, transport, stderr: () => string, close: () => Promise<void>}}
 */
export async function connectStdio(d, { token = d.token, url = d.url } = {}) {
  const transport = new StdioClientTransport({
    command: MOAT_BIN,
    args: ['mcp'],
    env: relayEnv(url, token),
    stderr: 'pipe',
  })
  let err = ''
  transport.stderr.on('data', (b) => { err += b })
  const client = new Client(CLIENT_INFO)
  try {
    await withTimeout(client.connect(transport), 30_000, 'connecting over moat mcp')
  } catch (e) {
    await client.close().catch(() => {})
    e.stderr = err
    throw e
  }
  return { client, transport, stderr: () => err, close: () => client.close() }
}

/** A connected SDK Client over Streamable HTTP at `${d.url}/mcp` (token null: none). */
export async function connectHttp(d, { token = d.token } = {}) {
  const headers = token === null ? {} : { Authorization: 'Bearer ' + token }
  const transport = new StreamableHTTPClientTransport(new URL(`${d.url}/mcp`), {
    requestInit: { headers },
  })
  const client = new Client(CLIENT_INFO)
  try {
    await withTimeout(client.connect(transport), 30_000, 'connecting to /mcp')
  } catch (e) {
    await client.close().catch(() => {})
    throw e
  }
  return {
    client,
    transport,
    stderr: () => '',
    close: async () => {
      await transport.terminateSession().catch(() => {})
      await client.close()
    },
  }
}

export const TRANSPORTS = { stdio: connectStdio, http: connectHttp }

/** tools/call, bounded. */
export async function call(client, name, args = {}, { timeout = 60_000, signal, onprogress } = {}) {
  return await withTimeout(client.callTool({ name, arguments: args }, undefined, { signal, timeout, onprogress }),
    timeout + 5000, `tools/call ${name}`)
}

/** The text of a result's text content blocks. */
export const textOf = (r) => (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n')

/** A tool result that must have succeeded: its structuredContent. */
export function ok(r, what) {
  if (r.isError) throw new Error(`${what} failed: ${textOf(r)}`)
  return r.structuredContent
}

// ---- moat's own /v1 API, to check effects -------------------------------------

const q = (p) => encodeURIComponent(p)

export async function v1Json(d, method, p, body) {
  const r = await d.v1(method, p, body)
  if (r.status < 200 || r.status >= 300) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.body}`)
  return r.body.length ? r.json() : null
}
export const v1Sandbox = (d, id) => d.v1('GET', `/v1/sandboxes/${id}`)
export async function v1Read(d, id, path) {
  const r = await d.v1('GET', `/v1/sandboxes/${id}/files?path=${q(path)}`)
  return r.status === 200 ? r.body : null
}
export async function v1Write(d, id, path, data) {
  const r = await d.v1('PUT', `/v1/sandboxes/${id}/files?path=${q(path)}`,
    Buffer.isBuffer(data) ? new Uint8Array(data) : Buffer.from(data))
  if (r.status !== 204) throw new Error(`PUT ${path}: HTTP ${r.status} ${r.body}`)
}
export const v1List = (d, id, path, depth) =>
  v1Json(d, 'GET', `/v1/sandboxes/${id}/files/list?path=${q(path)}${depth ? `&depth=${depth}` : ''}`)
export const v1Processes = (d, id) => v1Json(d, 'GET', `/v1/sandboxes/${id}/processes`)
export const v1Image = (d, id, path) => v1Json(d, 'GET', `/v1/sandboxes/${id}/image?path=${q(path)}`)

// ---- a PNG, made here -----------------------------------------------------------

const CRC = Array.from({ length: 256 }, (_, n) => {
  let c = n
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
  return c >>> 0
})
function crc32(buf) {
  let c = 0xffffffff
  for (const b of buf) c = CRC[(c ^ b) & 0xff] ^ (c >>> 8)
  return (c ^ 0xffffffff) >>> 0
}
function chunk(type, data) {
  const len = Buffer.alloc(4)
  len.writeUInt32BE(data.length)
  const td = Buffer.concat([Buffer.from(type, 'ascii'), data])
  const crc = Buffer.alloc(4)
  crc.writeUInt32BE(crc32(td))
  return Buffer.concat([len, td, crc])
}
/** An RGB PNG of width x height, pixels from (x, y). */
export function png(width, height) {
  const ihdr = Buffer.alloc(13)
  ihdr.writeUInt32BE(width, 0)
  ihdr.writeUInt32BE(height, 4)
  ihdr[8] = 8 // bit depth
  ihdr[9] = 2 // RGB
  const rows = []
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(1 + width * 3)
    for (let x = 0; x < width; x++) row.set([x * 40, y * 40, 200], 1 + x * 3)
    rows.push(row)
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(Buffer.concat(rows))),
    chunk('IEND', Buffer.alloc(0)),
  ])
}

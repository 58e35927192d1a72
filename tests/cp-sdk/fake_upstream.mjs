// A fake model upstream for the control plane's SDK tests and bench/cp_proxy.py:
// OpenAI Chat Completions, OpenAI Responses and Anthropic Messages on one
// loopback port, each plain and streamed (SSE), with scripted answers and a
// scripted tool call, and a log of every request as it arrived (headers and
// body as received, the arrival time on the wall clock).
//
// Pure node (no npm package), so that it runs from the test files and, as a
// command, from bench/cp_proxy.py:
//
//   node tests/cp-sdk/fake_upstream.mjs [--port N | --unix PATH] [--openai-key K] [--anthropic-key K]
//
// prints `PORT <n>` once listening (--unix: on that Unix socket instead, where
// TCP cannot listen: inside a sandbox, whose Landlock refuses TCP bind). GET /_fake/log returns the log (and
// ?clear=1 empties it); POST /_fake/clear empties it.
//
// Scripting (deterministic, so that a test can assert the exact answer):
//   chat        the answer is `chat answer to: <last user text>` (streamed: in
//               the pieces of STREAM_PIECES, one delta event each); with
//               `tools` and no tool message yet: a call of the first tool with
//               arguments {"city":"Paris"}; after a tool message: `tool said:
//               <its content>`
//   responses   `responses answer to: <input text>` (streamed: the pieces as
//               response.output_text.delta events)
//   messages    `messages answer to: <last user text>` (streamed: the pieces as
//               content_block_delta text_delta events)
//   model "error-429" (chat): a 429 rate_limit_exceeded in OpenAI's error shape
// The key: OpenAI paths want `Authorization: Bearer <openai key>`, Anthropic's
// `x-api-key: <anthropic key>` (or that key as a Bearer); anything else is a 401 in that dialect's shape.
import http from 'node:http'
import { fileURLToPath } from 'node:url'

export const STREAM_PIECES = ['str', 'eamed ', 'answer']
export const STREAMED = STREAM_PIECES.join('')
const USAGE = { in: 11, out: 7 }

const now = () => performance.timeOrigin + performance.now() // ms since the epoch, sub-ms

function lastUserText(messages) {
  for (let i = (messages || []).length - 1; i >= 0; i--) {
    const m = messages[i]
    if (m.role !== 'user') continue
    if (typeof m.content === 'string') return m.content
    if (Array.isArray(m.content)) return m.content.map((c) => c.text || '').join('')
  }
  return ''
}

function inputText(input) {
  if (typeof input === 'string') return input
  return lastUserText(input)
}

function sse(res, events) {
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' })
  for (const [name, data] of events) {
    // one write per event: the proxy sees them as separate chunks
    res.write((name ? `event: ${name}\n` : '') + `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`)
  }
  res.end()
}

function json(res, status, obj) {
  const b = JSON.stringify(obj)
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(b) })
  res.end(b)
}

function chat(req, res, body) {
  const model = body.model || 'fake'
  if (model === 'error-429') {
    return json(res, 429, { error: { message: 'fake: rate limited', type: 'rate_limit_error', code: 'rate_limit_exceeded' } })
  }
  const id = 'chatcmpl-fake'
  const created = Math.floor(Date.now() / 1000)
  const msgs = body.messages || []
  const toolMsg = msgs.find((m) => m.role === 'tool')
  let message
  if (Array.isArray(body.tools) && body.tools.length && !toolMsg) {
    message = {
      role: 'assistant', content: null,
      tool_calls: [{ id: 'call_fake_1', type: 'function',
        function: { name: body.tools[0].function?.name || 'tool', arguments: '{"city":"Paris"}' } }],
    }
  } else if (toolMsg) {
    message = { role: 'assistant', content: `tool said: ${toolMsg.content}` }
  } else {
    message = { role: 'assistant', content: `chat answer to: ${lastUserText(msgs)}` }
  }
  const finish = message.tool_calls ? 'tool_calls' : 'stop'
  const usage = { prompt_tokens: USAGE.in, completion_tokens: USAGE.out, total_tokens: USAGE.in + USAGE.out }
  if (!body.stream) {
    return json(res, 200, { id, object: 'chat.completion', created, model,
      choices: [{ index: 0, message, finish_reason: finish, logprobs: null }], usage })
  }
  const chunk = (delta, fr = null) => ({ id, object: 'chat.completion.chunk', created, model,
    choices: [{ index: 0, delta, finish_reason: fr, logprobs: null }] })
  const ev = [[null, chunk({ role: 'assistant', content: '' })]]
  if (message.tool_calls) {
    ev.push([null, chunk({ tool_calls: [{ index: 0, ...message.tool_calls[0] }] })])
  } else {
    for (const p of STREAM_PIECES) ev.push([null, chunk({ content: p })])
  }
  ev.push([null, chunk({}, finish)])
  if (body.stream_options?.include_usage) {
    ev.push([null, { id, object: 'chat.completion.chunk', created, model, choices: [], usage }])
  }
  ev.push([null, '[DONE]'])
  sse(res, ev)
}

function responses(req, res, body) {
  const model = body.model || 'fake'
  const created_at = Math.floor(Date.now() / 1000)
  const usage = { input_tokens: USAGE.in, output_tokens: USAGE.out, total_tokens: USAGE.in + USAGE.out,
    input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } }
  const text = body.stream ? STREAMED : `responses answer to: ${inputText(body.input)}`
  const item = { id: 'msg_fake', type: 'message', status: 'completed', role: 'assistant',
    content: [{ type: 'output_text', text, annotations: [] }] }
  const resp = (status, output, u) => ({ id: 'resp_fake', object: 'response', created_at, status, model,
    output, usage: u, error: null, incomplete_details: null, instructions: null, metadata: {},
    parallel_tool_calls: true, temperature: 1, tool_choice: 'auto', tools: [], top_p: 1 })
  if (!body.stream) return json(res, 200, resp('completed', [item], usage))
  let seq = 0
  const e = (type, o) => [type, { type, sequence_number: seq++, ...o }]
  const part0 = { type: 'output_text', text: '', annotations: [] }
  const ev = [
    e('response.created', { response: resp('in_progress', [], null) }),
    e('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', content: [] } }),
    e('response.content_part.added', { item_id: 'msg_fake', output_index: 0, content_index: 0, part: part0 }),
  ]
  for (const p of STREAM_PIECES) {
    ev.push(e('response.output_text.delta', { item_id: 'msg_fake', output_index: 0, content_index: 0, delta: p, logprobs: [] }))
  }
  ev.push(e('response.output_text.done', { item_id: 'msg_fake', output_index: 0, content_index: 0, text, logprobs: [] }))
  ev.push(e('response.content_part.done', { item_id: 'msg_fake', output_index: 0, content_index: 0, part: item.content[0] }))
  ev.push(e('response.output_item.done', { output_index: 0, item }))
  ev.push(e('response.completed', { response: resp('completed', [item], usage) }))
  sse(res, ev)
}

function messages(req, res, body) {
  const model = body.model || 'fake'
  const text = body.stream ? STREAMED : `messages answer to: ${lastUserText(body.messages)}`
  const msg = { id: 'msg_fake', type: 'message', role: 'assistant', model,
    content: [{ type: 'text', text }], stop_reason: 'end_turn', stop_sequence: null,
    usage: { input_tokens: USAGE.in, output_tokens: USAGE.out } }
  if (!body.stream) return json(res, 200, msg)
  const ev = [
    ['message_start', { type: 'message_start', message: { ...msg, content: [], stop_reason: null,
      usage: { input_tokens: USAGE.in, output_tokens: 1 } } }],
    ['content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }],
  ]
  for (const p of STREAM_PIECES) {
    ev.push(['content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: p } }])
  }
  ev.push(['content_block_stop', { type: 'content_block_stop', index: 0 }])
  ev.push(['message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null },
    usage: { output_tokens: USAGE.out } }])
  ev.push(['message_stop', { type: 'message_stop' }])
  sse(res, ev)
}

/**
 * Start the fake on 127.0.0.1 (port 0: a free one). Resolves to
 * { port, url, log, clear(), close() }; log holds
 * { t, method, path, port, headers, raw, body } per request, t in ms since the epoch.
 */
export function startFake({ port = 0, unix = null, openaiKey = 'sk-fake-openai', anthropicKey = 'sk-ant-fake' } = {}) {
  const log = []
  const server = http.createServer((req, res) => {
    const t = now()
    const parts = []
    req.on('data', (c) => parts.push(c))
    req.on('end', () => {
      const raw = Buffer.concat(parts).toString()
      const path = req.url.split('?')[0]
      if (req.method === 'GET' && path === '/_fake/log') {
        const out = JSON.stringify(log)
        if (req.url.includes('clear=1')) log.length = 0
        res.writeHead(200, { 'Content-Type': 'application/json' })
        return res.end(out)
      }
      if (req.method === 'POST' && path === '/_fake/clear') {
        log.length = 0
        res.writeHead(204)
        return res.end()
      }
      let body = null
      try {
        body = raw ? JSON.parse(raw) : {}
      } catch {}
      // port: the client's source port, one per connection (is it kept alive?)
      log.push({ t, method: req.method, path, port: req.socket.remotePort, headers: req.headers, raw, body })
      const anthropic = path.endsWith('/messages')
      // (the Anthropic SDK sends its key as `Authorization: Bearer` since 1.x; the
      // proxy sends x-api-key: either is the key)
      const ok = anthropic
        ? req.headers['x-api-key'] === anthropicKey || req.headers.authorization === `Bearer ${anthropicKey}`
        : req.headers.authorization === `Bearer ${openaiKey}`
      if (!ok) {
        return anthropic
          ? json(res, 401, { type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key' } })
          : json(res, 401, { error: { message: 'Incorrect API key provided', type: 'invalid_request_error', code: 'invalid_api_key' } })
      }
      if (req.method !== 'POST' || body === null) {
        return json(res, 400, { error: { message: `fake: cannot ${req.method} ${path}`, type: 'invalid_request_error' } })
      }
      if (path.endsWith('/chat/completions')) return chat(req, res, body)
      if (path.endsWith('/responses')) return responses(req, res, body)
      if (anthropic) return messages(req, res, body)
      json(res, 404, { error: { message: `fake: no route ${path}`, type: 'invalid_request_error' } })
    })
  })
  server.keepAliveTimeout = 60_000
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    const where = unix ? [unix] : [port, '127.0.0.1']
    server.listen(...where, () => {
      const p = unix ? 0 : server.address().port
      resolve({
        port: p, url: `http://127.0.0.1:${p}`, log,
        clear: () => { log.length = 0 },
        close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()) }),
      })
    })
  })
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2)
  const opt = (n, d) => {
    const i = args.indexOf(n)
    return i >= 0 ? args[i + 1] : d
  }
  const f = await startFake({ port: Number(opt('--port', '0')), unix: opt('--unix', null), openaiKey: opt('--openai-key', 'sk-fake-openai'),
    anthropicKey: opt('--anthropic-key', 'sk-ant-fake') })
  process.stdout.write(`PORT ${f.port}\n`)
  const stop = () => f.close().then(() => process.exit(0))
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}

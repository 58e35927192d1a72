// The agent of sdk.test.mjs: runs INSIDE a session's sandbox, as the agent
// command, with the official `openai` and `@anthropic-ai/sdk` clients
// constructed with no options at all: they read OPENAI_BASE_URL,
// OPENAI_API_KEY, ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, which the
// session's `agent.sdk_env: true` set to the control plane and the session
// token. Each call's outcome (or its error) goes into the JSON file named by
// argv[2], which the test reads back through /v1 files.
import fs from 'node:fs'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'

const out = process.argv[2] || '/workspace/result.json'
// 'all' (default): every call below; 'budget': two plain chat calls only
const mode = process.argv[3] || 'all'
const env = {}
for (const k of ['MOAT_SESSION_ID', 'MOAT_CONTROL_PLANE_URL', 'MOAT_SESSION_TOKEN', 'OPENAI_BASE_URL',
  'OPENAI_API_KEY', 'ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY']) env[k] = process.env[k] ?? null
const result = { env, calls: {} }

async function call(name, fn) {
  try {
    result.calls[name] = { ok: true, ...(await fn()) }
  } catch (e) {
    result.calls[name] = { ok: false, error: String(e?.stack || e), status: e?.status ?? null }
  }
}

// No baseURL, no apiKey: only the env. (maxRetries 0: a failure shows as
// itself, not as three attempts.) A constructor that throws (no key in the
// env) is recorded, and every call then fails on its own.
let openai = null
let anthropic = null
try {
  openai = new OpenAI({ maxRetries: 0 })
} catch (e) {
  result.construct_openai = String(e)
}
try {
  anthropic = new Anthropic({ maxRetries: 0 })
} catch (e) {
  result.construct_anthropic = String(e)
}

/** An error the call must raise, as the SDK's error class shows it. */
async function raised(fn) {
  try {
    return { thrown: false, value: await fn() }
  } catch (e) {
    return { thrown: true, status: e?.status ?? null, name: e?.constructor?.name, message: String(e?.message),
      rateLimit: e instanceof OpenAI.RateLimitError }
  }
}

await call('chat', async () => {
  const r = await openai.chat.completions.create({ model: 'gpt-fake', messages: [{ role: 'user', content: 'hello chat' }] })
  return { text: r.choices[0].message.content, usage: r.usage }
})

if (mode === 'budget') {
  await call('chat_over_budget', () => raised(() =>
    openai.chat.completions.create({ model: 'gpt-fake', messages: [{ role: 'user', content: 'one more' }] })))
  finish()
  process.exit(0)
}

// the upstream's own error, relayed: the SDK raises its typed error
await call('chat_error', () => raised(() =>
  openai.chat.completions.create({ model: 'error-429', messages: [{ role: 'user', content: 'hello error' }] })))

await call('chat_stream', async () => {
  const s = await openai.chat.completions.create({ model: 'gpt-fake', stream: true,
    stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hello stream' }] })
  const deltas = []
  let usage = null
  for await (const c of s) {
    const d = c.choices[0]?.delta?.content
    if (d) deltas.push(d)
    if (c.usage) usage = c.usage
  }
  return { deltas, usage }
})

await call('chat_tool', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'the weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }]
  const messages = [{ role: 'user', content: 'weather in Paris?' }]
  const r1 = await openai.chat.completions.create({ model: 'gpt-fake', messages, tools })
  const tc = r1.choices[0].message.tool_calls?.[0]
  if (!tc) throw new Error(`no tool call: ${JSON.stringify(r1.choices[0])}`)
  const args = JSON.parse(tc.function.arguments)
  messages.push(r1.choices[0].message)
  messages.push({ role: 'tool', tool_call_id: tc.id, content: `sunny in ${args.city}` })
  const r2 = await openai.chat.completions.create({ model: 'gpt-fake', messages, tools })
  return { tool: tc.function.name, args, finish: r1.choices[0].finish_reason, text: r2.choices[0].message.content }
})

await call('responses', async () => {
  const r = await openai.responses.create({ model: 'gpt-fake', input: 'hello responses' })
  return { text: r.output_text, usage: r.usage }
})

await call('responses_stream', async () => {
  const s = await openai.responses.create({ model: 'gpt-fake', input: 'hello responses stream', stream: true })
  const deltas = []
  let completed = null
  for await (const ev of s) {
    if (ev.type === 'response.output_text.delta') deltas.push(ev.delta)
    if (ev.type === 'response.completed') completed = ev.response.status
  }
  return { deltas, completed }
})

await call('messages', async () => {
  const r = await anthropic.messages.create({ model: 'claude-fake', max_tokens: 64,
    messages: [{ role: 'user', content: 'hello messages' }] })
  return { text: r.content[0].text, usage: r.usage }
})

await call('messages_stream', async () => {
  const s = await anthropic.messages.create({ model: 'claude-fake', max_tokens: 64, stream: true,
    messages: [{ role: 'user', content: 'hello messages stream' }] })
  const deltas = []
  const types = []
  for await (const ev of s) {
    types.push(ev.type)
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') deltas.push(ev.delta.text)
  }
  return { deltas, types }
})

// the SDK's own stream helper, which accumulates the message
await call('messages_helper', async () => {
  const m = await anthropic.messages.stream({ model: 'claude-fake', max_tokens: 64,
    messages: [{ role: 'user', content: 'hello helper' }] }).finalMessage()
  return { text: m.content[0].text, stop: m.stop_reason }
})

finish()

function finish() {
  fs.writeFileSync(out + '.tmp', JSON.stringify(result, null, 1))
  fs.renameSync(out + '.tmp', out)
}

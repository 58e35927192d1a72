// The official npm clients, unchanged, INSIDE a session's sandbox (issue 14):
// `openai` (Chat Completions plain, streamed and with a tool call; Responses
// plain and streamed) and `@anthropic-ai/sdk` (Messages plain, streamed, and
// the stream helper) run in agent.mjs as the session's agent command, with no
// configuration but the env `agent.sdk_env: true` gives them, against moat
// serve's LLM proxy and the fake upstream of fake_upstream.mjs.
//
// What is asserted on the host side: the answers the fake scripted came back
// through the SDKs (streamed deltas one by one), the fake saw the real keys
// (the route's family's header) and never the session token, the sandbox's
// result never holds a real key, and the session's usage counted the calls.
//
// The sandbox sees the host's system directories only (not this package's
// node_modules), so the SDKs and agent.mjs go in as one tar file through the
// session's manifest (a local_file under --allow-host-path) and are unpacked
// into the sandbox's /tmp (tmpfs) by the agent command, with agent.mjs beside
// node_modules so that its bare imports resolve.
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { Daemon, waitFor } from '../node/daemon.mjs'
import { STREAM_PIECES, STREAMED, startFake } from './fake_upstream.mjs'

const here = path.dirname(fileURLToPath(import.meta.url))
const OA_KEY = 'sk-real-openai-' + crypto.randomBytes(12).toString('hex')
const AN_KEY = 'sk-ant-real-' + crypto.randomBytes(12).toString('hex')
const TOKEN_RE = /^moat_st_[0-9a-f]{64}$/
// every call agent.mjs makes, by the path it reaches upstream
const CALLS = { chat: 5, responses: 2, messages: 3 } // chat: plain, error, stream, tool call's two
const NCALLS = CALLS.chat + CALLS.responses + CALLS.messages
const NUSAGE = NCALLS - 1 // the error's answer has no usage

let fake
let d
let tarPath

/** The SDKs and agent.mjs, without types, maps and sources: one file for the manifest. */
function makeTar(dir) {
  const p = path.join(dir, 'sdk.tar')
  execFileSync('tar', ['-cf', p, '--exclude=*.d.ts', '--exclude=*.d.mts', '--exclude=*.d.cts',
    '--exclude=*.map', '--exclude=*.md', '--exclude=node_modules/openai/src',
    '--exclude=node_modules/@anthropic-ai/sdk/src', '--exclude=node_modules/.package-lock.json',
    'agent.mjs', 'node_modules'], { cwd: here })
  fs.chmodSync(p, 0o644)
  return p
}

async function createSession(body) {
  const r = await d.v1('POST', '/v1/sessions', body)
  assert.equal(r.status, 201, `POST /v1/sessions: ${r.status} ${r.body}`)
  return r.json()
}

const agentCmd = (mode = 'all') => ['sh', '-c',
  `mkdir -p /tmp/sdk && tar -xf /workspace/sdk.tar -C /tmp/sdk && exec node /tmp/sdk/agent.mjs /workspace/result.json ${mode}`]

/** A session running agent.mjs; waits for its agent to exit; its result file and session. */
async function runAgent({ routes = ['oa', 'an'], sdkEnv = true, mode = 'all', budget } = {}) {
  const s = await createSession({
    manifest: { root: '/workspace', entries: { 'sdk.tar': { type: 'local_file', src: tarPath } } },
    agent: { cmd: agentCmd(mode), sdk_env: sdkEnv },
    llm: { routes },
    ...(budget ? { budget } : {}),
  })
  assert.match(s.id, /^ses_[a-z0-9]{16}$/)
  const done = await waitFor(async () => {
    const r = await d.v1('GET', `/v1/sessions/${s.id}`)
    const o = r.json()
    return o.state !== 'running' ? o : null
  }, { timeout: 90_000, step: 100, what: `session ${s.id}'s agent to exit` })
  const f = await d.v1('GET', `/v1/sandboxes/${done.sandbox_id}/files?path=${encodeURIComponent('/workspace/result.json')}`)
  assert.equal(f.status, 200, `the agent wrote no result (session ${JSON.stringify(done)}): ${f.body}\n${d.log().slice(-3000)}`)
  return { session: done, raw: f.body.toString(), result: JSON.parse(f.body.toString()) }
}

function okCall(result, name) {
  const c = result.calls[name]
  assert.ok(c, `no ${name} call recorded`)
  assert.ok(c.ok, `${name} failed inside the sandbox: ${c.error}`)
  return c
}

before(async () => {
  fake = await startFake({ openaiKey: OA_KEY, anthropicKey: AN_KEY })
  d = new Daemon()
  const secrets = path.join(d.base, 'secrets')
  fs.writeFileSync(secrets, `OA_KEY=${OA_KEY}\nAN_KEY=${AN_KEY}\n`, { mode: 0o600 })
  const share = path.join(d.base, 'share')
  fs.mkdirSync(share, { mode: 0o755 })
  tarPath = makeTar(share)
  d.args = ['--llm-route', `oa=${fake.url},family=openai,key=OA_KEY`,
    '--llm-route', `an=${fake.url},family=anthropic,key=AN_KEY`,
    '--secrets-file', secrets, '--allow-host-path', share]
  await d.start()
})

after(async () => {
  try {
    const r = await d?.v1('GET', '/v1/sessions')
    for (const s of (r?.status === 200 ? r.json().sessions : []) || []) {
      await d.v1('DELETE', `/v1/sessions/${s.id}`).catch(() => {})
    }
  } catch {}
  await d?.stop()
  await fake?.close()
})

describe('the official SDKs inside a session sandbox, configured by sdk_env alone', () => {
  let run
  let seen

  before(async () => {
    fake.clear()
    run = await runAgent()
    seen = [...fake.log]
  })

  test('the session gave the SDKs the control plane and the session token, nothing else', () => {
    const { env } = run.result
    assert.match(env.MOAT_SESSION_TOKEN, TOKEN_RE)
    assert.equal(env.MOAT_SESSION_ID, run.session.id)
    assert.equal(env.MOAT_CONTROL_PLANE_URL, 'http://127.0.0.1:7878')
    assert.equal(env.OPENAI_BASE_URL, 'http://127.0.0.1:7878/llm/oa/v1')
    assert.equal(env.ANTHROPIC_BASE_URL, 'http://127.0.0.1:7878/llm/an')
    assert.equal(env.OPENAI_API_KEY, env.MOAT_SESSION_TOKEN)
    assert.equal(env.ANTHROPIC_API_KEY, env.MOAT_SESSION_TOKEN)
    // the real keys never reached the sandbox, in the env or in any answer
    assert.ok(!run.raw.includes(OA_KEY), 'the OpenAI key reached the sandbox')
    assert.ok(!run.raw.includes(AN_KEY), 'the Anthropic key reached the sandbox')
    assert.equal(run.session.agent.exit_code, 0, JSON.stringify(run.session))
  })

  test('openai chat.completions.create: plain, streamed, and a tool call round trip', () => {
    assert.equal(okCall(run.result, 'chat').text, 'chat answer to: hello chat')
    // the upstream's 429 came back as it was sent: the SDK's RateLimitError
    const er = okCall(run.result, 'chat_error')
    assert.deepEqual([er.thrown, er.status, er.rateLimit], [true, 429, true], JSON.stringify(er))
    assert.match(er.message, /fake: rate limited/)
    const st = okCall(run.result, 'chat_stream')
    assert.deepEqual(st.deltas, STREAM_PIECES, 'the streamed deltas, one event each')
    assert.equal(st.usage?.completion_tokens, 7)
    const tc = okCall(run.result, 'chat_tool')
    assert.equal(tc.tool, 'get_weather')
    assert.deepEqual(tc.args, { city: 'Paris' })
    assert.equal(tc.finish, 'tool_calls')
    assert.equal(tc.text, 'tool said: sunny in Paris')
    // the tool's answer went up as the SDK sent it (pass-through)
    const up = seen.filter((r) => r.path === '/v1/chat/completions' && r.body?.tools)
    assert.equal(up.length, 2)
    const toolMsg = up[1].body.messages.find((m) => m.role === 'tool')
    assert.deepEqual([toolMsg?.tool_call_id, toolMsg?.content], ['call_fake_1', 'sunny in Paris'])
  })

  test('openai responses.create: plain and streamed', () => {
    assert.equal(okCall(run.result, 'responses').text, 'responses answer to: hello responses')
    const st = okCall(run.result, 'responses_stream')
    assert.deepEqual(st.deltas, STREAM_PIECES)
    assert.equal(st.completed, 'completed')
  })

  test('anthropic messages.create: plain, streamed, and the stream helper', () => {
    assert.equal(okCall(run.result, 'messages').text, 'messages answer to: hello messages')
    const st = okCall(run.result, 'messages_stream')
    assert.deepEqual(st.deltas, STREAM_PIECES)
    assert.deepEqual(st.types, ['message_start', 'content_block_start', 'content_block_delta',
      'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'])
    const h = okCall(run.result, 'messages_helper')
    assert.deepEqual([h.text, h.stop], [STREAMED, 'end_turn'])
  })

  test('the upstream saw every call with the real key of its family, never the session token', () => {
    const token = run.result.env.MOAT_SESSION_TOKEN
    const by = (suffix) => seen.filter((r) => r.path === `/v1/${suffix}`)
    assert.equal(by('chat/completions').length, CALLS.chat)
    assert.equal(by('responses').length, CALLS.responses)
    assert.equal(by('messages').length, CALLS.messages)
    assert.equal(seen.length, NCALLS, `unexpected upstream requests: ${seen.map((r) => r.path)}`)
    for (const r of seen) {
      const all = JSON.stringify(r.headers) + r.raw
      assert.ok(!all.includes(token), `the session token went upstream in ${r.path}`)
      assert.ok(!all.includes('moat_st_'), `a session token went upstream in ${r.path}`)
      if (r.path === '/v1/messages') {
        assert.equal(r.headers['x-api-key'], AN_KEY)
        assert.ok(!r.headers.authorization, 'the agent\'s Authorization header went upstream')
        // the client's anthropic-version is passed on
        assert.ok(r.headers['anthropic-version'], 'no anthropic-version upstream')
      } else {
        assert.equal(r.headers.authorization, `Bearer ${OA_KEY}`)
        assert.ok(!r.headers['x-api-key'])
      }
    }
    // streamed calls went up as streamed calls, the models as asked
    assert.equal(by('messages').filter((r) => r.body.stream).length, 2)
    assert.deepEqual(by('chat/completions').map((r) => r.body.model).sort(),
      ['error-429', 'gpt-fake', 'gpt-fake', 'gpt-fake', 'gpt-fake'])
  })

  test('the session counted every call and its tokens', async () => {
    const r = await d.v1('GET', `/v1/sessions/${run.session.id}/usage`)
    assert.equal(r.status, 200, String(r.body))
    const { usage } = r.json()
    assert.equal(usage.requests, NCALLS)
    // each scripted answer reports 11 tokens in, 7 out (the error none)
    assert.equal(usage.tokens_in, 11 * NUSAGE)
    assert.equal(usage.tokens_out, 7 * NUSAGE)
  })
})

test('a used-up budget reaches the SDK as its RateLimitError naming the budget, and nothing goes upstream', async () => {
  fake.clear()
  const { result, session } = await runAgent({ mode: 'budget', budget: { requests: 1 } })
  assert.equal(okCall(result, 'chat').text, 'chat answer to: hello chat')
  const over = okCall(result, 'chat_over_budget')
  assert.deepEqual([over.thrown, over.status, over.rateLimit], [true, 429, true], JSON.stringify(over))
  assert.match(over.message, /budget\.requests = 1/)
  assert.equal(fake.log.length, 1, 'the call over budget reached the upstream')
  assert.equal(session.budget_exceeded, 'requests')
})

test('sdk_env sets only the families the session has routes of', async () => {
  fake.clear()
  const { result } = await runAgent({ routes: ['an'] })
  assert.equal(result.env.OPENAI_BASE_URL, null)
  assert.equal(result.env.OPENAI_API_KEY, null)
  assert.ok(result.construct_openai, 'the openai client found a key without an openai route')
  assert.equal(result.env.ANTHROPIC_BASE_URL, 'http://127.0.0.1:7878/llm/an')
  assert.equal(okCall(result, 'messages').text, 'messages answer to: hello messages')
  assert.ok(fake.log.every((r) => r.path === '/v1/messages'), `${fake.log.map((r) => r.path)}`)
})

test('without sdk_env the SDKs get no configuration (the three moat variables only)', async () => {
  fake.clear()
  const { result } = await runAgent({ sdkEnv: false })
  assert.match(result.env.MOAT_SESSION_TOKEN, TOKEN_RE)
  for (const k of ['OPENAI_BASE_URL', 'OPENAI_API_KEY', 'ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY']) {
    assert.equal(result.env[k], null, `${k} is set without sdk_env`)
  }
  assert.ok(result.construct_openai, 'the openai client found a key')
  // (the Anthropic client constructs without a key and fails on its first call)
  assert.equal(result.calls.messages.ok, false)
  assert.equal(fake.log.length, 0, 'a call reached the upstream without sdk_env')
})

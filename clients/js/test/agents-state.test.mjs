// Serialize and resume into the same live sandbox; developer-owned and
// provided sessions; a stale state. Checked through moat's /v1 API.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { run, UserError } from '@openai/agents'
import { Manifest } from '@openai/agents/sandbox'
import { functionCall, assistantMessage, modelResponder } from '@openai/agents/testing'
import { Daemon, rejection, tag } from '../../../tests/node/daemon.mjs'
import { MoatSandboxClient } from '../src/agents.js'
import { agentWith, outputs, parseExec } from './agents-helpers.mjs'

let d
before(async () => {
  d = new Daemon()
  await d.start()
})
after(async () => {
  await d?.stop()
})

const SECRET_ENV = `env-secret-${tag()}`
const newClient = (mark) => new MoatSandboxClient({ baseUrl: d.url, token: d.token, metadata: { mark } })
const exists = async (id) => (await d.v1('GET', `/v1/sandboxes/${id}`)).status === 200
const text = async (id, p) => (await d.v1('GET', `/v1/sandboxes/${id}/files?path=${p}`)).body.toString()

test('serialize -> JSON -> deserialize -> resume reattaches the same live sandbox; no token, URL or env values in it', async () => {
  const mark = tag()
  const client = newClient(mark)
  const session = await client.create({
    manifest: new Manifest({ entries: { 'a.txt': { type: 'file', content: 'A\n' } }, environment: { SECRET: SECRET_ENV } }),
  })
  const id = session.state.sandboxId
  // a developer-owned session survives a run that uses it
  const first = agentWith([
    [functionCall('exec_command', { cmd: 'echo first-run > b.txt; echo "$SECRET" | wc -c' }, { callId: 's1' })],
    [assistantMessage('done')],
  ])
  const r1 = await run(first.agent, 'go', { sandbox: { session }, maxTurns: 4 })
  assert.equal(parseExec(outputs(r1).get('s1')).output.trim(), String(SECRET_ENV.length + 1))
  assert.ok(await exists(id))
  assert.equal(await text(id, 'b.txt'), 'first-run\n')

  const json = JSON.stringify(await client.serializeSessionState(session.state))
  assert.ok(!json.includes(d.token), json)
  assert.ok(!json.includes(SECRET_ENV), json)
  assert.ok(!json.includes(String(d.port)), json)
  assert.ok(json.includes(id))

  // another client (another process, say) resumes from the JSON, through
  // its own configured URL and token: URL/token smuggled into the state are ignored
  const other = newClient(mark)
  const state = await other.deserializeSessionState({ ...JSON.parse(json), baseUrl: 'http://127.0.0.1:9', token: 'e2b_x' })
  assert.ok(state.manifest instanceof Manifest)
  assert.ok(state.manifest.entries['a.txt'])
  const resumed = await other.resume(state)
  assert.equal(resumed.state.sandboxId, id)
  const out = parseExec(await resumed.execCommand({ cmd: 'cat a.txt b.txt; echo "$SECRET"' }))
  assert.equal(out.output, `A\nfirst-run\n${SECRET_ENV}\n`)

  // sandbox: {client, sessionState}: the runner resumes, owns, and deletes it at the end
  const second = agentWith([
    [functionCall('exec_command', { cmd: 'cat b.txt' }, { callId: 's2' })],
    [assistantMessage('done')],
  ])
  const r2 = await run(second.agent, 'go', { sandbox: { client: other, sessionState: state }, maxTurns: 4 })
  assert.equal(parseExec(outputs(r2).get('s2')).output, 'first-run\n')
  assert.equal(await exists(id), false)

  // now stale: resume says so
  const e = await rejection(other.resume(state))
  assert.ok(e instanceof UserError, String(e))
  assert.match(e.message, new RegExp(`sandbox ${id} is gone`))
  await other.delete(state) // idempotent
})

test('deserializeSessionState refuses a state without a valid sandbox id', async () => {
  const c = newClient(tag())
  for (const bad of [{}, { sandboxId: '../x' }, { sandboxId: 42 }, null]) {
    const e = await rejection(c.deserializeSessionState(bad))
    assert.ok(e instanceof UserError, String(e))
  }
})

test('a provided session: the agent manifest delta is materialised into the live sandbox (applyManifest)', async () => {
  const mark = tag()
  const client = newClient(mark)
  const session = await client.create({ manifest: new Manifest({ entries: { 'base.txt': { type: 'file', content: 'base\n' } } }) })
  const id = session.state.sandboxId
  try {
    let during = null
    const { agent } = agentWith([
      modelResponder(async () => {
        during = {
          base: await text(id, 'base.txt'),
          extra: await text(id, 'extra/added.txt'),
          bin: new Uint8Array((await d.v1('GET', `/v1/sandboxes/${id}/files?path=extra/b.bin`)).body),
        }
        return [functionCall('exec_command', { cmd: 'cat extra/added.txt' }, { callId: 'm1' })]
      }),
      [assistantMessage('done')],
    ], {
      agent: {
        defaultManifest: new Manifest({
          entries: {
            'base.txt': { type: 'file', content: 'base\n' },
            extra: { type: 'dir', children: { 'added.txt': { type: 'file', content: 'added\n' }, 'b.bin': { type: 'file', content: new Uint8Array([0, 255]) } } },
          },
        }),
      },
    })
    const r = await run(agent, 'go', { sandbox: { session }, maxTurns: 4 })
    assert.deepEqual(during, { base: 'base\n', extra: 'added\n', bin: new Uint8Array([0, 255]) })
    assert.equal(parseExec(outputs(r).get('m1')).output, 'added\n')
    assert.ok(session.state.manifest.entries.extra, 'the runner commits the delta to the session manifest')
    assert.ok(await exists(id), 'a provided session is not deleted by the runner')
  } finally {
    await session.delete()
  }
  assert.equal(await exists(id), false)
})

test('a normal run persists no owned session state (canPersistOwnedSessionState is false)', async () => {
  const mark = tag()
  const { agent } = agentWith([[functionCall('exec_command', { cmd: 'true' }, { callId: 'n1' })], [assistantMessage('done')]])
  const r = await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 4 })
  const s = JSON.stringify(r.state.toJSON())
  assert.ok(!s.includes(d.token))
  assert.ok(!/"sandboxId"/.test(s), s.slice(0, 400))
  assert.deepEqual((await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes, [])
})

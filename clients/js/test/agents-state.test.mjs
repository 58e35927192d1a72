// Serialize and resume into the same live sandbox; developer-owned and
// provided sessions; a stale state. Checked through moat's /v1 API.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { run, RunState, UserError } from '@openai/agents'
import { Manifest, shell } from '@openai/agents/sandbox'
import { functionCall, assistantMessage, modelResponder } from '@openai/agents/testing'
import { rejection, tag } from '../../../tests/node/daemon.mjs'
import { useDaemon } from './daemon-fixture.mjs'
import { MoatSandboxClient } from '../src/agents.js'
import { agentWith, outputs, parseExec } from './agents-helpers.mjs'

const d = useDaemon()

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

test('a resumed session reaches a process started before (write_stdin ids are moat process ids)', async () => {
  const mark = tag()
  const client = newClient(mark)
  const session = await client.create({ manifest: new Manifest() })
  try {
    const started = parseExec(await session.execCommand({ cmd: 'read x; echo "later:$x"', yieldTimeMs: 100 }))
    assert.equal(typeof started.sessionId, 'number')
    const json = JSON.stringify(await client.serializeSessionState(session.state))
    const other = newClient(mark)
    const resumed = await other.resume(await other.deserializeSessionState(JSON.parse(json)))
    const done = parseExec(await resumed.writeStdin({ sessionId: started.sessionId, chars: 'ok\n', yieldTimeMs: 3000 }))
    assert.equal(done.exitCode, 0)
    assert.equal(done.output, 'later:ok\n')
    // ^C after a resume: the new session asks moat whether the process has a tty
    const plain = parseExec(await session.execCommand({ cmd: 'sleep 60', yieldTimeMs: 100 }))
    const term = parseExec(await session.execCommand({ cmd: 'cat', tty: true, yieldTimeMs: 100 }))
    const again = await other.resume(await other.deserializeSessionState(JSON.parse(json)))
    assert.equal(parseExec(await again.writeStdin({ sessionId: plain.sessionId, chars: '\u0003', yieldTimeMs: 3000 })).exitCode, 128 + 2)
    const t = parseExec(await again.writeStdin({ sessionId: term.sessionId, chars: '\u0003', yieldTimeMs: 3000 }))
    assert.equal(t.exitCode, 128 + 2)
    assert.match(t.output, /\^C/, 'on a tty, ^C went through the terminal')
  } finally {
    await session.delete()
  }
})

test('an interrupted run (tool approval) keeps its sandbox; the RunState resumes into it and the run then deletes it', async () => {
  const mark = tag()
  const { agent } = agentWith([
    [functionCall('exec_command', { cmd: 'echo before > mark.txt' }, { callId: 'i1' })],
    [functionCall('exec_command', { cmd: 'cat mark.txt; echo approved' }, { callId: 'i2' })],
    [assistantMessage('done')],
  ], {
    agent: {
      capabilities: [shell({
        configureTools: (tools) => tools.map((t) => t.name === 'exec_command'
          ? { ...t, needsApproval: async (_ctx, args) => String(args?.cmd ?? '').includes('approved') }
          : t),
      })],
    },
  })
  const r1 = await run(agent, 'go', { sandbox: { client: newClient(mark) }, maxTurns: 6 })
  assert.equal(r1.interruptions.length, 1)
  const live = (await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes
  assert.equal(live.length, 1, 'the interrupted run keeps its sandbox')
  const saved = r1.state.toString()
  assert.ok(!saved.includes(d.token))
  assert.ok(saved.includes(live[0].id))

  // as another process would: a fresh client and the RunState from its string
  const state = await RunState.fromString(agent, saved)
  state.approve(state.getInterruptions()[0])
  const c2 = newClient(mark)
  const resumed = []
  const realResume = c2.resume.bind(c2)
  c2.resume = async (st, o) => {
    resumed.push(st.sandboxId)
    return await realResume(st, o)
  }
  const r2 = await run(agent, state, { sandbox: { client: c2 }, maxTurns: 6 })
  assert.equal(parseExec(outputs(r2).get('i2')).output, 'before\napproved\n')
  // through client.resume (what another process does), into the same sandbox
  assert.deepEqual(resumed, [live[0].id])
  assert.deepEqual((await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes, [])
})

test('persistWorkspace / hydrateWorkspace carry a workspace from one sandbox to another (moat archives)', async () => {
  const mark = tag()
  const client = newClient(mark)
  const a = await client.create({ manifest: new Manifest({ entries: { 'k/keep.txt': { type: 'file', content: 'kept\n' } } }) })
  const b = await client.create({ manifest: new Manifest() })
  try {
    const tar = await a.persistWorkspace()
    await b.hydrateWorkspace(tar)
    assert.equal(await text(b.state.sandboxId, 'k/keep.txt'), 'kept\n')
  } finally {
    await a.delete()
    await b.delete()
  }
})

test('snapshotWorkspace: a moat snapshot (same host) that a later run starts from, through the client option image', async () => {
  const mark = tag()
  const client = newClient(mark)
  const a = await client.create({ manifest: new Manifest({ entries: { 'w/state.txt': { type: 'file', content: 'at the snapshot\n' } } }) })
  let snap
  try {
    snap = await a.snapshotWorkspace({ name: `agents-${mark}` })
    assert.equal(snap.sandbox_id, a.state.sandboxId)
    assert.ok((await d.v1('GET', '/v1/snapshots')).json().snapshots.some((s) => s.id === snap.id))
    // the tar contract is unchanged: bytes, whatever the snapshots
    assert.ok((await a.persistWorkspace()) instanceof Uint8Array)
    await d.v1('PUT', `/v1/sandboxes/${a.state.sandboxId}/files?path=w/state.txt`, 'changed later\n')
  } finally {
    await a.delete()
  }
  // the parent is gone; a run whose sandbox the runner creates from the snapshot
  const { agent } = agentWith([
    [functionCall('exec_command', { cmd: 'cat w/state.txt' }, { callId: 'p1' })],
    [assistantMessage('done')],
  ])
  const fromSnap = new MoatSandboxClient({ baseUrl: d.url, token: d.token, metadata: { mark }, image: `snapshot:${snap.id}` })
  const r = await run(agent, 'go', { sandbox: { client: fromSnap }, maxTurns: 4 })
  assert.equal(parseExec(outputs(r).get('p1')).output, 'at the snapshot\n')
  assert.deepEqual((await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes, [], 'the run deletes its sandbox')
  assert.equal((await d.v1('DELETE', `/v1/snapshots/${snap.id}`)).status, 204)
  // an unknown snapshot: the create fails naming it
  const bad = new MoatSandboxClient({ baseUrl: d.url, token: d.token, image: 'snapshot:nosuchsnap' })
  const e = await rejection(bad.create({ manifest: new Manifest() }))
  assert.match(String(e?.message), /nosuchsnap/)
})

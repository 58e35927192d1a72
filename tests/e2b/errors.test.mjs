// The SDK's error classes, as a user meets them against moat: a bad API key,
// a missing file, a command timeout, a failing command, a killed sandbox.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import {
  AuthenticationError, CommandExitError, FileNotFoundError, NotFoundError, Sandbox,
  SandboxError, SandboxNotFoundError, TimeoutError,
} from 'e2b'
import { rejection, startDaemon, tag } from './harness.mjs'

let d, s
before(async () => {
  d = await startDaemon()
  s = await Sandbox.create()
}, { timeout: 90_000 })
after(async () => {
  await s?.kill().catch(() => {})
  await d?.stop()
}, { timeout: 60_000 })

const isA = (e, ...classes) => classes.some((c) => e instanceof c)
const name = (e) => `${e?.constructor?.name}: ${e?.message}`

describe('errors', { timeout: 240_000 }, () => {
  it('a wrong API key is AuthenticationError (and creates nothing)', async () => {
    const before = (await d.v1('GET', '/v1/sandboxes')).json().sandboxes.length
    const bad = 'e2b_' + '0'.repeat(40)
    const e = await rejection(Sandbox.create({ apiKey: bad }), 30_000, 'create with a wrong key to fail')
    assert.ok(e instanceof AuthenticationError, name(e))
    const e2 = await rejection(Sandbox.list({ apiKey: bad }).nextItems(), 30_000, 'list with a wrong key to fail')
    assert.ok(e2 instanceof AuthenticationError, name(e2))
    // the key of the right length but another token, and a key sent to kill
    const e3 = await rejection(Sandbox.kill(s.sandboxId, { apiKey: 'e2b_' + tag(20) }), 30_000, 'kill with a wrong key')
    assert.ok(e3 instanceof AuthenticationError, name(e3))
    assert.equal(await s.isRunning(), true)
    assert.equal((await d.v1('GET', '/v1/sandboxes')).json().sandboxes.length, before)
  })

  it('envd refuses a request without the sandbox access token', async () => {
    // a raw envd call naming the sandbox but without X-Access-Token
    const r = await fetch(`${d.url}/filesystem.Filesystem/Stat`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json', 'Connect-Protocol-Version': '1',
        'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': '49983',
      },
      body: JSON.stringify({ path: '/home/user' }),
      signal: AbortSignal.timeout(20_000),
    })
    await r.arrayBuffer()
    assert.equal(r.status, 401)
    // nor with the API key in its place
    const r2 = await fetch(`${d.url}/process.Process/List`, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json', 'Connect-Protocol-Version': '1',
        'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': d.token,
      },
      body: '{}',
      signal: AbortSignal.timeout(20_000),
    })
    await r2.arrayBuffer()
    assert.equal(r2.status, 401)
  })

  it('files.read of a missing path is FileNotFoundError', async () => {
    const e = await rejection(s.files.read(`/home/user/none-${tag()}`))
    assert.ok(isA(e, FileNotFoundError, NotFoundError), name(e))
    assert.ok(e instanceof SandboxError, name(e))
  })

  it('a failing command is CommandExitError', async () => {
    const e = await rejection(s.commands.run('exit 42'))
    assert.ok(e instanceof CommandExitError, name(e))
    assert.equal(e.exitCode, 42)
    const e2 = await rejection(s.commands.run('no-such-command-here'))
    assert.ok(e2 instanceof CommandExitError, name(e2))
    assert.equal(e2.exitCode, 127)
  })

  it('a command over its timeoutMs is TimeoutError (or CommandExitError of the kill)', async () => {
    const e = await rejection(s.commands.run('sleep 20', { timeoutMs: 1000 }), 15_000, 'the timeout')
    assert.ok(isA(e, TimeoutError, CommandExitError), name(e))
  })

  it('commands.kill of an unknown pid is false', async () => {
    assert.equal(await s.commands.kill(4_000_000), false)
  })

  it('a killed sandbox: connect is SandboxNotFoundError, calls fail, isRunning false', async () => {
    const k = await Sandbox.create()
    assert.equal(await k.kill(), true)
    const e = await rejection(Sandbox.connect(k.sandboxId), 30_000, 'connect to fail')
    assert.ok(isA(e, SandboxNotFoundError, NotFoundError), name(e))
    assert.equal(await k.isRunning(), false)
    const e2 = await rejection(k.commands.run('echo hi'), 30_000, 'run in a killed sandbox to fail')
    assert.ok(isA(e2, TimeoutError, SandboxNotFoundError, NotFoundError, SandboxError), name(e2))
    const e3 = await rejection(k.files.read('/home/user/x'), 30_000, 'read in a killed sandbox to fail')
    assert.ok(e3 instanceof SandboxError, name(e3))
    assert.equal(await Sandbox.kill(k.sandboxId), false)
  })

  it('an unknown sandbox id is not found', async () => {
    const e = await rejection(Sandbox.connect('zzzz' + tag(8)), 30_000, 'connect to fail')
    assert.ok(isA(e, SandboxNotFoundError, NotFoundError), name(e))
    assert.equal(await Sandbox.kill('zzzz' + tag(8)), false)
  })
})
